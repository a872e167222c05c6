//! A declared problem has a type: the URI clients tell it by.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

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

#[idempotent(
    scope = "global",
    problems = [problem(409, "", "version conflict")]
)]
async fn update_order(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "updated"
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(update_order))
            .with_state(AppState { idem })
    };
}
