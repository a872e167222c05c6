//! `Verified` with a state that gives it no `WebhookSecret`, with neither `state = AppState`
//! nor a `State<AppState>` argument: only axum's `Handler` error at `.route(…)` can report it,
//! for the state `AppState` (not for `WebhookSecret` taken as the router's state).

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::webhooks::Verified;
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

#[derive(serde::Deserialize, serde::Serialize)]
struct Event {
    id: String,
}

#[idempotent(scope = "global", key = header("webhook-id"))]
async fn provider_event(
    tx: &mut Transaction<'_, Sqlite>,
    Verified(JsonBody(event)): Verified<JsonBody<Event>>,
) -> StatusCode {
    let _ = (tx, event.id);
    StatusCode::NO_CONTENT
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/events", post(provider_event))
            .with_state(AppState { idem })
    };
}
