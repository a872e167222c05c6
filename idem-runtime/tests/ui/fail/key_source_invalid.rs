//! Keys taken from the request, spelled wrong: a header name in capitals, a pointer without
//! `/`, a function the attribute does not know, an empty list.

use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{JsonBody, idempotent};

#[idempotent(scope = "global", key = header("Webhook-Id"))]
async fn capitals(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "ok"
}

#[idempotent(scope = "global", key = body("id"))]
async fn no_slash(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> &'static str {
    let _ = (tx, event);
    "ok"
}

#[idempotent(scope = "global", key = query("id"))]
async fn unknown(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "ok"
}

#[idempotent(scope = "global", key = [])]
async fn empty(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "ok"
}

fn main() {}
