//! Without `state = …`, a `State<T>` argument stands for the router's state when `T` is an
//! `IdemState` of the handler's backend, and is checked as `state = T` would check it; a
//! sub-state taken with `FromRef` is not the router's state, and is not checked against.

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::protocol::Record;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::staged::{Attempt, Finished, StepError};
use idem_runtime::store::Backend;
use idem_runtime::webhooks::{Verified, WebhookSecret};
use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
    prices: Prices,
    secret: WebhookSecret,
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

impl FromRef<AppState> for WebhookSecret {
    fn from_ref(state: &AppState) -> Self {
        state.secret.clone()
    }
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

/// A sub-state only: not an `IdemState`, so nothing is checked against it.
#[idempotent(scope = "global")]
async fn create_order(
    State(prices): State<Prices>,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> (StatusCode, String) {
    let _ = tx;
    (StatusCode::CREATED, format!("{} at {}", order.sku, prices.euro_cents))
}

/// The state by a path, beside a sub-state, with a verified webhook.
#[idempotent(scope = "global", key = header("webhook-id"))]
async fn provider_event(
    State(prices): State<Prices>,
    axum::extract::State(state): axum::extract::State<AppState>,
    tx: &mut Transaction<'_, Sqlite>,
    Verified(JsonBody(order)): Verified<JsonBody<NewOrder>>,
) -> StatusCode {
    let _ = (tx, state.idem.config(), prices.euro_cents, order.sku);
    StatusCode::NO_CONTENT
}

/// A staged handler: its state's principal is stored with the key.
#[idempotent(scope = "global", mode = "staged")]
async fn send_mail(
    State(state): State<AppState>,
    attempt: Attempt<Sqlite>,
) -> Result<Finished, StepError> {
    let _ = state.prices.euro_cents;
    attempt
        .finish(async |_| Record::json(StatusCode::CREATED, &1).map_err(StepError::retryable))
        .await
}

struct GenericState<DB: Backend> {
    idem: Idem<DB>,
}

impl<DB: Backend> Clone for GenericState<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
        }
    }
}

impl<DB: Backend> IdemState<DB> for GenericState<DB> {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

/// A state generic over the backend, checked under the handler's bounds.
#[idempotent(scope = "global")]
async fn archive_order<DB: Backend>(
    State(state): State<GenericState<DB>>,
    tx: &mut Transaction<'_, DB>,
    JsonBody(order): JsonBody<NewOrder>,
) -> String {
    let _ = (tx, state.idem.config());
    format!("{} archived", order.sku)
}

fn main() {
    let _: fn(Idem<Sqlite>, WebhookSecret) -> Router = |idem, secret| {
        Router::new()
            .route("/orders", post(create_order))
            .route("/events", post(provider_event))
            .route("/mails", post(send_mail))
            .with_state(AppState {
                idem,
                prices: Prices { euro_cents: 100 },
                secret,
            })
    };
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders/archive", post(archive_order::<Sqlite>))
            .with_state(GenericState { idem })
    };
}
