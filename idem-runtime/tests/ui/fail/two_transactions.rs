use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

#[idempotent(scope = "global")]
async fn create_order(
    tx: &mut Transaction<'_, Sqlite>,
    other: &mut Transaction<'_, Sqlite>,
) -> &'static str {
    let _ = (tx, other);
    "created"
}

fn main() {}
