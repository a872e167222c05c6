//! The smallest real use: a `scope = "global"` handler on SQLite, routed in an axum router.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
use serde::Deserialize;

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

#[derive(Deserialize, serde::Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(ttl = "24h", scope = "global")]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> Result<(StatusCode, String), StatusCode> {
    idem_runtime::sqlx::query("INSERT INTO orders (sku) VALUES (?1)")
        .bind(&order.sku)
        .execute(&mut **tx)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok((StatusCode::CREATED, order.sku))
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
