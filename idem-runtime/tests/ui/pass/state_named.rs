//! `state = AppState`: the attribute checks the state and every extractor against it at the
//! handler. Extractors that need the state (`State`, a `FromRef` sub-state, an extractor
//! bounded on the state) work as without it.

use axum::Router;
use axum::extract::{FromRef, FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
    prices: Prices,
}

#[derive(Clone)]
struct Prices {
    euro_cents: u32,
}

impl FromRef<AppState> for Prices {
    fn from_ref(state: &AppState) -> Self {
        state.prices.clone()
    }
}

impl IdemState<Sqlite> for AppState {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

/// An extractor that only works with this application's state.
struct Currency(&'static str);

impl FromRequestParts<AppState> for Currency {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, StatusCode> {
        let _ = state.prices.euro_cents;
        Ok(Self("EUR"))
    }
}

impl idem_runtime::Input for Currency {
    type Part = idem_runtime::fingerprint::part::Headers;
    fn write(
        &self,
        out: idem_runtime::fingerprint::InputWriter<'_>,
    ) -> Result<(), idem_runtime::fingerprint::FingerprintError> {
        out.text(self.0)
    }
}

#[derive(Deserialize, Serialize)]
struct NewOrder {
    sku: String,
}

#[idempotent(scope = "global", state = AppState)]
async fn create_order(
    State(prices): State<Prices>,
    State(state): State<AppState>,
    currency: Currency,
    Path(shop): Path<u32>,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> (StatusCode, String) {
    let _ = (tx, state.idem.config());
    (
        StatusCode::CREATED,
        format!(
            "{} in shop {shop}: {} {}",
            order.sku, prices.euro_cents, currency.0
        ),
    )
}

/// A path to the state type works as well as its name.
#[idempotent(scope = "global", state = self::AppState)]
async fn delete_order(Path(id): Path<u64>, tx: &mut Transaction<'_, Sqlite>) -> StatusCode {
    let _ = (tx, id);
    StatusCode::NO_CONTENT
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/shops/{shop}/orders", post(create_order))
        .route("/orders/{id}", post(delete_order))
        .with_state(AppState {
            idem,
            prices: Prices { euro_cents: 100 },
        })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
