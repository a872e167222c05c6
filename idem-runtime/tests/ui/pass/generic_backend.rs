//! A handler generic over the backend, as in `examples/src/orders.rs`.

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::store::Backend;
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

struct AppState<DB: Backend> {
    idem: Idem<DB>,
}

impl<DB: Backend> Clone for AppState<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
        }
    }
}

impl<DB: Backend> IdemState<DB> for AppState<DB> {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

#[idempotent(ttl = "1h30m", scope = "global")]
async fn create_order<DB: Backend>(tx: &mut Transaction<'_, DB>) -> impl IntoResponse {
    let _ = tx;
    (StatusCode::CREATED, "created")
}

#[idempotent(scope = "global")]
async fn cancel_order<DB>(tx: &mut Transaction<'_, DB>) -> StatusCode
where
    DB: Backend,
{
    let _ = tx;
    StatusCode::NO_CONTENT
}

/// A generic state is named with a turbofish: `state = AppState::<DB>`.
#[idempotent(scope = "global", state = AppState::<DB>)]
async fn archive_order<DB: Backend>(Path(id): Path<u64>, tx: &mut Transaction<'_, DB>) -> String {
    let _ = tx;
    format!("order {id} archived")
}

fn router<DB: Backend>(idem: Idem<DB>) -> Router {
    Router::new()
        .route("/orders", post(create_order::<DB>))
        .route("/orders/cancel", post(cancel_order::<DB>))
        .route("/orders/{id}/archive", post(archive_order::<DB>))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router::<Sqlite>;
}
