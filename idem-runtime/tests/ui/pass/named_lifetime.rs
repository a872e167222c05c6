//! A handler that names its transaction's lifetime compiles without an unused-lifetime
//! warning on the generated wrapper.

#![deny(warnings, unused_lifetimes)]

use idem_runtime::idempotent;
use idem_runtime::sqlx::{Sqlite, Transaction};

#[idempotent(scope = "global")]
async fn create_order<'a>(tx: &mut Transaction<'a, Sqlite>) -> &'static str {
    let _ = tx;
    "created"
}

fn main() {
    let _ = create_order;
}
