//! Every argument of the attribute at once.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Check, Checked, Idem, IdemState, Problem, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
    note: Option<String>,
}

impl Check for NewOrder {
    fn check(&self) -> Result<(), Problem> {
        Ok(())
    }
}

#[idempotent(
    ttl = "2d",
    scope = "global",
    operation = "POST /orders",
    version = 3,
    on_expired = "reexecute",
    key = "optional",
    mode = "atomic",
    store_client_errors = true,
    exclude = ["body.note", "query.trace", "headers"],
    state = AppState,
)]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    Checked(order): Checked<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, order.sku)
}

#[idempotent(
    ttl = "365d",
    scope = "global",
    operation = "DELETE /orders",
    version = 1,
    on_expired = "gone",
    key = "required",
    store_client_errors = false,
    exclude = [],
)]
async fn delete_orders(tx: &mut Transaction<'_, Sqlite>) -> StatusCode {
    let _ = tx;
    StatusCode::NO_CONTENT
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order).delete(delete_orders))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
