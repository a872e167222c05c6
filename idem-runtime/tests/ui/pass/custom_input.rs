//! A custom extractor that implements `Input` is fingerprinted next to axum's `Path` and
//! `Query`, with no marker on the argument; one that is `part::Ignored` is left out.

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::put;
use idem_runtime::fingerprint::{FingerprintError, InputWriter, part};
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, Input, idempotent};
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

/// A header that changes the outcome.
struct Priority(u8);

impl<S: Send + Sync> FromRequestParts<S> for Priority {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        parts
            .headers
            .get("x-priority")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .map(Self)
            .ok_or(StatusCode::BAD_REQUEST)
    }
}

impl Input for Priority {
    type Part = part::Headers;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

/// A header that does not: a request id changes between retries.
struct RequestId(String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        let id = parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        Ok(Self(id.to_owned()))
    }
}

impl Input for RequestId {
    type Part = part::Ignored;
    fn write(&self, _: InputWriter<'_>) -> Result<(), FingerprintError> {
        Ok(())
    }
}

#[derive(Deserialize, Serialize)]
struct Options {
    notify: bool,
}

#[idempotent(scope = "global", exclude = ["query.notify"])]
async fn set_priority(
    State(state): State<AppState>,
    Path(order): Path<u64>,
    Query(options): Query<Options>,
    tx: &mut Transaction<'_, Sqlite>,
    request_id: RequestId,
    priority: Priority,
) -> String {
    let _ = (tx, state.idem.config());
    format!(
        "order {order}: priority {}, notify {} ({})",
        priority.0, options.notify, request_id.0
    )
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders/{order}/priority", put(set_priority))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
