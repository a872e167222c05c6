//! A staged handler whose state's principal is not `Serialize` + `Deserialize`, without
//! `state = AppState`: its `State<AppState>` argument names the state, and the mistake is
//! reported there.

use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::post;
use idem_runtime::protocol::Record;
use idem_runtime::sqlx::Sqlite;
use idem_runtime::staged::{Attempt, Finished, StepError};
use idem_runtime::{Idem, IdemState, Principal, idempotent};

#[derive(Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = Caller;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

/// Stands in for a verified session.
struct Caller {
    tenant: String,
}

impl Principal for Caller {
    fn tenant(&self) -> Option<&str> {
        Some(&self.tenant)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        Err(StatusCode::UNAUTHORIZED)
    }
}

#[idempotent(scope = "tenant", mode = "staged")]
async fn create_order(
    State(state): State<AppState>,
    attempt: Attempt<Sqlite>,
) -> Result<Finished, StepError> {
    let _ = state.idem.config();
    attempt
        .finish(async |_| Record::json(StatusCode::CREATED, &1).map_err(StepError::retryable))
        .await
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
