//! `state = AppState` where `AppState` does not implement `IdemState`.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Idem, idempotent};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

#[idempotent(scope = "global", state = AppState)]
async fn create_order(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "created"
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
