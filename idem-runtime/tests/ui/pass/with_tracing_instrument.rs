//! `#[idempotent]` composes with `#[tracing::instrument]` placed above it: the span wraps the
//! whole protocol, replays included.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
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

#[derive(Debug, Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[tracing::instrument(skip_all)]
#[idempotent(scope = "global", ttl = "1h")]
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
