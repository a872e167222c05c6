//! A custom extractor marked `#[input]` is fingerprinted next to axum's `Path` and `Query`.

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::put;
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

/// The body of the request, read from a header for the sake of the example.
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
    const PART: &'static str = "body";
    fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self.0)
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
    #[input] priority: Priority,
) -> String {
    let _ = (tx, state.idem.config());
    format!("order {order}: priority {}, notify {}", priority.0, options.notify)
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders/{order}/priority", put(set_priority))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
