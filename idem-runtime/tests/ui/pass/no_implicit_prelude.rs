//! The expansion is hygienic: it names only `::idem_runtime::__private`, `::core` and
//! `::std`, so it compiles in a module without the prelude.

mod handlers {
    #![no_implicit_prelude]

    use ::axum::http::StatusCode;
    use ::idem_runtime::idempotent;
    use ::idem_runtime::sqlx::{Sqlite, Transaction};
    use ::std::string::String;

    #[idempotent(
        ttl = "24h",
        scope = "global",
        operation = "POST /orders",
        version = 2,
        on_expired = "reexecute",
        key = "optional",
        mode = "atomic",
        store_client_errors = true,
        exclude = ["body.note"],
        state = super::AppState,
    )]
    pub(crate) async fn create_order(
        tx: &mut Transaction<'_, Sqlite>,
        ::axum::extract::Path(id): ::axum::extract::Path<u32>,
        ::idem_runtime::Checked(order): ::idem_runtime::Checked<super::NewOrder>,
    ) -> ::core::result::Result<(StatusCode, String), StatusCode> {
        let _ = tx;
        let _ = id;
        ::core::result::Result::Ok((StatusCode::CREATED, order.sku))
    }

    #[idempotent(scope = "tenant")]
    pub(crate) async fn delete_order<DB: ::idem_runtime::store::Backend>(
        tx: &mut Transaction<'_, DB>,
    ) -> StatusCode {
        let _ = tx;
        StatusCode::NO_CONTENT
    }
}

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::sqlx::Sqlite;
use idem_runtime::{Check, Idem, IdemState, Principal, Problem};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
    note: String,
}

impl Check for NewOrder {
    fn check(&self) -> Result<(), Problem> {
        Ok(())
    }
}

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

struct Tenant;

impl Principal for Tenant {
    fn tenant(&self) -> Option<&str> {
        Some("acme")
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self)
    }
}

impl IdemState<Sqlite> for AppState {
    type Principal = Tenant;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders/{id}", post(handlers::create_order))
        .route(
            "/orders/{id}/delete",
            post(handlers::delete_order::<Sqlite>),
        )
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
