//! A SQLite transaction in a handler whose state is an `IdemState` for PostgreSQL.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::{Postgres, Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

#[derive(Clone)]
struct AppState {
    idem: Idem<Postgres>,
}

impl IdemState<Postgres> for AppState {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<Postgres> {
        &self.idem
    }
}

#[idempotent(scope = "global", state = AppState)]
async fn create_order(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "created"
}

fn main() {
    let _: fn(Idem<Postgres>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
