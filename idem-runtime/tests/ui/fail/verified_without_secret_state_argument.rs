//! `Verified` with a state that gives it no `WebhookSecret` (`impl FromRef<AppState> for
//! WebhookSecret` is missing), without `state = AppState`: the handler's `State<AppState>`
//! argument names the state, and the mistake is reported at the extractor.

use axum::Router;
use axum::extract::State;
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
    State(state): State<AppState>,
    tx: &mut Transaction<'_, Sqlite>,
    Verified(JsonBody(event)): Verified<JsonBody<Event>>,
) -> StatusCode {
    let _ = (tx, event.id, state.idem.config());
    StatusCode::NO_CONTENT
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/events", post(provider_event))
            .with_state(AppState { idem })
    };
}
