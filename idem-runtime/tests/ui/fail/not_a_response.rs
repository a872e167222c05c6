use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

struct Order;

#[idempotent(scope = "global")]
async fn create_order(tx: &mut Transaction<'_, Sqlite>) -> Order {
    let _ = tx;
    Order
}

fn main() {}
