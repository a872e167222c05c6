//! `Option<T>` of an input is an input of the same part (`null` when absent), for the
//! extractors axum accepts in an `Option` (`Path`, `Json`, …). axum 0.8 has no
//! `Option<Query<T>>`: an optional query is a `Query<T>` whose fields are all optional.

use axum::extract::{Path, Query};
use axum::routing::post;
use axum::{Json, Router};
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

#[derive(Deserialize, Serialize)]
struct Page {
    after: Option<u64>,
}

#[idempotent(scope = "global", state = AppState)]
async fn with_path(
    id: Option<Path<u64>>,
    tx: &mut Transaction<'_, Sqlite>,
    Query(page): Query<Page>,
) -> String {
    let _ = tx;
    format!("{:?} {:?}", id.map(|Path(id)| id), page.after)
}

#[derive(Deserialize, Serialize)]
struct Note {
    text: String,
}

#[idempotent(scope = "global")]
async fn with_body(
    Query(page): Query<Page>,
    tx: &mut Transaction<'_, Sqlite>,
    note: Option<Json<Note>>,
) -> String {
    let _ = tx;
    format!("{:?} {:?}", page.after, note.map(|Json(note)| note.text))
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/a/{id}", post(with_path))
        .route("/b", post(with_body))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
