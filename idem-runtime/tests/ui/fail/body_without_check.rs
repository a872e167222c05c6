//! `Checked<T>` where `T` has no `Check`.

use axum::Router;
use axum::routing::post;
use idem_runtime::Checked;
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

#[idempotent(scope = "global")]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    Checked(order): Checked<NewOrder>,
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
