//! axum's wrapper for custom rejections, implementing `Input` once.
//!
//! `#[derive(FromRequest)] #[from_request(via(axum::Json), rejection(ApiError))]` needs
//! axum's `macros` feature, which these tests do not enable; the `FromRequest` impl below is
//! what the derive writes.

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
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

struct ApiError(StatusCode);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self(rejection.status())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, "bad body").into_response()
    }
}

struct AppJson<T>(T);

// What `#[derive(FromRequest)] #[from_request(via(axum::Json), rejection(ApiError))]` writes.
impl<S, T> FromRequest<S> for AppJson<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(value) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Self(value))
    }
}

impl<T: Serialize> Input for AppJson<T> {
    type Part = part::Body;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(scope = "global")]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    AppJson(order): AppJson<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, order.sku)
}

#[idempotent(scope = "global", state = AppState)]
async fn update_order(
    tx: &mut Transaction<'_, Sqlite>,
    AppJson(order): AppJson<NewOrder>,
) -> String {
    let _ = tx;
    order.sku
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/orders", post(create_order).put(update_order))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
