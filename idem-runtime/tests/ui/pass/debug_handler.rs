use axum::Router;
use axum::extract::{FromRequest, Path};
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::fingerprint::{FingerprintError, InputWriter, part};
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, Input, JsonBody, idempotent};
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

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(scope = "global")]
#[axum::debug_handler(state = AppState)]
async fn create_order(
    Path(shop): Path<u32>,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, format!("{} {shop}", order.sku))
}

struct ApiError(StatusCode);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self(rejection.status())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
struct AppJson<T>(T);

impl<T: Serialize> Input for AppJson<T> {
    type Part = part::Body;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

#[idempotent(scope = "global")]
async fn update_order(tx: &mut Transaction<'_, Sqlite>, AppJson(order): AppJson<NewOrder>) -> String {
    let _ = tx;
    order.sku
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders/{shop}", post(create_order).put(update_order))
            .with_state(AppState { idem })
    };
}
