//! A staged handler: an `Attempt` instead of a transaction, journaled steps, the last step
//! storing the response.

use axum::Router;
use axum::routing::post;
use idem_runtime::protocol::Record;
use idem_runtime::sqlx::Sqlite;
use idem_runtime::staged::{Attempt, Finished, StepError};
use idem_runtime::JsonBody;
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

#[derive(serde::Deserialize, serde::Serialize)]
struct Charge {
    amount: u64,
}

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

#[idempotent(scope = "global", mode = "staged", lease = "45s", on_in_flight = "wait")]
async fn create_order(
    attempt: Attempt<Sqlite>,
    JsonBody(charge): JsonBody<Charge>,
) -> Result<Finished, StepError> {
    let id: String = attempt
        .step("charge", async |provider_key| Ok(format!("{provider_key}-{}", charge.amount)))
        .await?;
    attempt
        .finish(async |tx| {
            sqlx::query("INSERT INTO charges (id) VALUES (?1)")
                .bind(&id)
                .execute(&mut **tx)
                .await?;
            Ok(Record::json(http::StatusCode::CREATED, &serde_json::json!({ "id": id }))?)
        })
        .await
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = |idem| {
        Router::new()
            .route("/orders", post(create_order))
            .with_state(AppState { idem })
    };
}
