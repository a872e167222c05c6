//! `scope = "tenant"` with a state whose principal is `Anonymous`, which never names a
//! tenant: every request would answer 401, so it is a compile error.

use axum::http::StatusCode;
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Anonymous, Idem, IdemState, idempotent};

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

#[idempotent(ttl = "1h", scope = "tenant", state = AppState)]
async fn create_order(tx: &mut Transaction<'_, Sqlite>) -> StatusCode {
    let _ = tx;
    StatusCode::CREATED
}

fn main() {
    let _ = create_order;
}
