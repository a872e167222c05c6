//! Raw bodies: `Bytes` and `String` are inputs (hashed as sent), and so are axum's `Form`
//! and `RawQuery`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Form, RawQuery};
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};
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

#[idempotent(scope = "global")]
async fn upload(tx: &mut Transaction<'_, Sqlite>, body: Bytes) -> String {
    let _ = tx;
    format!("{} bytes", body.len())
}

#[idempotent(scope = "global", state = AppState)]
async fn note(RawQuery(query): RawQuery, tx: &mut Transaction<'_, Sqlite>, text: String) -> String {
    let _ = tx;
    format!("{text} ({})", query.unwrap_or_default())
}

#[derive(Deserialize, Serialize)]
struct Signup {
    email: String,
}

#[idempotent(scope = "global", state = AppState)]
async fn signup(tx: &mut Transaction<'_, Sqlite>, Form(signup): Form<Signup>) -> StatusCode {
    let _ = (tx, signup.email);
    StatusCode::CREATED
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/uploads", post(upload))
        .route("/notes", post(note))
        .route("/signups", post(signup))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
