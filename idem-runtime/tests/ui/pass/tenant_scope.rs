//! `scope = "tenant"`: the state names the application's own authenticated extractor.

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Idem, IdemState, Principal, idempotent};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = Caller;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

/// Stands in for a verified session.
struct Caller {
    tenant: String,
    user: String,
}

impl Principal for Caller {
    fn tenant(&self) -> Option<&str> {
        Some(&self.tenant)
    }
    fn user(&self) -> Option<&str> {
        Some(&self.user)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        let tenant = parts
            .headers
            .get("x-verified-tenant")
            .and_then(|v| v.to_str().ok())
            .ok_or(StatusCode::UNAUTHORIZED)?;
        Ok(Self {
            tenant: tenant.to_owned(),
            user: String::from("someone"),
        })
    }
}

#[idempotent(ttl = "7d", scope = "tenant")]
async fn create_order(caller: Caller, tx: &mut Transaction<'_, Sqlite>) -> String {
    let _ = tx;
    format!("order for {} by {}", caller.tenant, caller.user)
}

#[idempotent(ttl = "15m", scope = "user")]
async fn update_profile(tx: &mut Transaction<'_, Sqlite>) -> StatusCode {
    let _ = tx;
    StatusCode::NO_CONTENT
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .route("/profile", post(update_profile))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
