//! `JsonBody<T>` where `T` is `Deserialize` but not `Serialize`: it cannot be fingerprinted.

use axum::Router;
use axum::routing::post;
use idem_runtime::JsonBody;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};
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

#[derive(Deserialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(scope = "global")]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> String {
    let _ = tx;
    order.sku
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
