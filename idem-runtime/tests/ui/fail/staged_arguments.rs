//! A staged operation needs its key, and a lease of at least a second.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::Sqlite;
use idem_runtime::staged::{Attempt, Finished, StepError};
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

#[idempotent(scope = "global", mode = "staged", key = "optional", lease = "500ms")]
async fn create_order(attempt: Attempt<Sqlite>) -> Result<Finished, StepError> {
    attempt.finish(async |_tx| Err(StepError::retryable("not yet"))).await
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
