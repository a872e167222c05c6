use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

struct Header(u32);

#[idempotent(scope = "global")]
async fn create_order(#[input] header: Header, tx: &mut Transaction<'_, Sqlite>) -> String {
    let _ = tx;
    header.0.to_string()
}

fn main() {}
