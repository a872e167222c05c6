//! Inputs are decided by type, not by spelling: axum's `Json` under another name, a type
//! alias, a fully qualified path and `Option<Json<T>>` are all the body.

use axum::Json as AxJson;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};
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
}

type Body = axum::Json<NewOrder>;

#[idempotent(scope = "global")]
async fn aliased(tx: &mut Transaction<'_, Sqlite>, AxJson(order): AxJson<NewOrder>) -> String {
    let _ = tx;
    order.sku
}

#[idempotent(scope = "global", state = AppState)]
async fn type_alias(tx: &mut Transaction<'_, Sqlite>, body: Body) -> AxJson<NewOrder> {
    let _ = tx;
    body
}

#[idempotent(scope = "global")]
async fn qualified(
    tx: &mut Transaction<'_, Sqlite>,
    ::axum::Json(order): ::axum::Json<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, order.sku)
}

#[idempotent(scope = "global", state = AppState)]
async fn optional(tx: &mut Transaction<'_, Sqlite>, order: Option<AxJson<NewOrder>>) -> String {
    let _ = tx;
    order.map(|AxJson(order)| order.sku).unwrap_or_default()
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/a", post(aliased))
        .route("/b", post(type_alias))
        .route("/c", post(qualified))
        .route("/d", post(optional))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
