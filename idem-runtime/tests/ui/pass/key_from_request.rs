//! Keys taken from the request: a header, a body field, several parts; in atomic and staged
//! mode.

use axum::Router;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::staged::{Attempt, Finished, StepError};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};

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

#[idempotent(scope = "global", key = header("webhook-id"), state = AppState)]
async fn by_header(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> &'static str {
    let _ = (tx, event);
    "ok"
}

#[idempotent(scope = "global", key = [body("/psp"), header("x-merchant")])]
async fn by_parts(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> &'static str {
    let _ = (tx, event);
    "ok"
}

#[idempotent(mode = "staged", scope = "global", key = body("/id"))]
async fn staged(
    attempt: Attempt<Sqlite>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> Result<Finished, StepError> {
    let _ = event;
    attempt
        .finish(async |_| Ok(idem_runtime::protocol::Record::json(axum::http::StatusCode::OK, "done")?))
        .await
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/header", post(by_header))
            .route("/parts", post(by_parts))
            .route("/staged", post(staged))
            .with_state(AppState { idem })
    };
}
