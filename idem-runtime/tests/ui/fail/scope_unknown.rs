use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

#[idempotent(scope = "tenants")]
async fn create_order(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "created"
}

fn main() {}
