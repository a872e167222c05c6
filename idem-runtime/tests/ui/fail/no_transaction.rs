//! A handler without a transaction argument.

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use idem_runtime::sqlx::Sqlite;
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

#[idempotent(scope = "global")]
async fn create_order(Path(id): Path<u32>) -> String {
    id.to_string()
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
