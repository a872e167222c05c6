use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

#[idempotent(scope = "global")]
async fn create_order(tx: &Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "created"
}

fn main() {}
