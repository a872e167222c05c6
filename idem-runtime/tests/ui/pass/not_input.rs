//! `#[not_input]` leaves an extractor out of the fingerprint where it is used: a `HeaderMap`
//! (which is not an `Input`: most headers change between retries), a custom extractor, an
//! input that should not count for this handler.

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
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

/// A request id, not what the client asks for.
struct TraceId(String);

impl<S: Send + Sync> FromRequestParts<S> for TraceId {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, StatusCode> {
        let id = parts
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok());
        Ok(Self(id.unwrap_or_default().to_owned()))
    }
}

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(scope = "global")]
async fn create_order(
    #[not_input] headers: HeaderMap,
    #[not_input] trace: TraceId,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> (StatusCode, String) {
    let _ = (tx, headers.len(), trace.0);
    (StatusCode::CREATED, order.sku)
}

/// `#[not_input]` on an input: here the order id does not count (the path decides the
/// route, not the request's meaning).
#[idempotent(scope = "global", state = AppState)]
async fn touch_order(
    #[not_input] Path(id): Path<u64>,
    tx: &mut Transaction<'_, Sqlite>,
    #[not_input] headers: HeaderMap,
) -> String {
    let _ = tx;
    format!("{id}: {}", headers.len())
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{id}/touch", post(touch_order))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
