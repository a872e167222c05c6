//! `scope = "tenant"` with the principal taken as an argument too: the handler receives the
//! value idem extracted for the scope (authentication runs once), and the principal is never
//! part of the fingerprint.

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Idem, IdemState, JsonBody, Principal, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = BearerTenant;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

/// Stands in for a verified bearer token.
struct BearerTenant(String);

impl Principal for BearerTenant {
    fn tenant(&self) -> Option<&str> {
        Some(&self.0)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for BearerTenant {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()?.strip_prefix("Bearer "))
            .map(|token| Self(token.to_owned()))
            .ok_or(StatusCode::UNAUTHORIZED)
    }
}

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(ttl = "24h", scope = "tenant")]
async fn create_order(
    BearerTenant(tenant): BearerTenant,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, format!("{} for {tenant}", order.sku))
}

/// The principal after another extractor, with the state named.
#[idempotent(scope = "tenant", state = AppState)]
async fn cancel_order(
    Path(id): Path<u64>,
    tenant: BearerTenant,
    tx: &mut Transaction<'_, Sqlite>,
) -> String {
    let _ = tx;
    format!("order {id} of {} cancelled", tenant.0)
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{id}/cancel", post(cancel_order))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
