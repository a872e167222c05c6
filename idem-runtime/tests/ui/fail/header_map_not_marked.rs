//! A `HeaderMap` is not an input (most headers change between retries): it must be marked `#[not_input]`.

use axum::Router;
use axum::http::HeaderMap;
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

#[idempotent(scope = "global")]
async fn create_order(headers: HeaderMap, tx: &mut Transaction<'_, Sqlite>) -> String {
    let _ = tx;
    headers.len().to_string()
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
