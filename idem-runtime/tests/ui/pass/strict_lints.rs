//! The expansion compiles without a single warning under strict lints. (trybuild runs rustc,
//! not clippy, so `clippy::pedantic` would check nothing here.)

#![deny(warnings)]
#![deny(rust_2018_idioms, unused)]
#![deny(
    missing_debug_implementations,
    unreachable_pub,
    unused_qualifications,
    unused_results,
    unused_lifetimes,
    single_use_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    let_underscore_drop,
    elided_lifetimes_in_paths
)]

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::routing::post;
use idem_runtime::sqlx::{self, Sqlite, Transaction};
use idem_runtime::{Anonymous, Check, Checked, Idem, IdemState, JsonBody, Problem, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
struct AppState {
    idem: Idem<Sqlite>,
}

impl IdemState<Sqlite> for AppState {
    type Principal = Anonymous;
    fn idem(&self) -> &Idem<Sqlite> {
        &self.idem
    }
}

#[derive(Debug, Deserialize, Serialize)]
struct NewOrder {
    sku: String,
    note: String,
}

impl Check for NewOrder {
    fn check(&self) -> Result<(), Problem> {
        Ok(())
    }
}

#[derive(Debug, Deserialize, Serialize)]
struct Options {
    dry_run: bool,
}

/// Creates an order.
#[idempotent(ttl = "24h", scope = "global", exclude = ["body.note"])]
async fn create_order(
    Path(shop): Path<u32>,
    Query(options): Query<Options>,
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(order): JsonBody<NewOrder>,
) -> Result<(StatusCode, String), StatusCode> {
    if options.dry_run {
        return Err(StatusCode::UNPROCESSABLE_ENTITY);
    }
    let _done = sqlx::query("INSERT INTO orders (shop, sku, note) VALUES (?1, ?2, ?3)")
        .bind(shop)
        .bind(&order.sku)
        .bind(&order.note)
        .execute(&mut **tx)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok((StatusCode::CREATED, order.sku))
}

/// Replaces an order, with the checks that need the state.
#[idempotent(ttl = "7d", scope = "global", state = AppState, mode = "atomic")]
async fn replace_order(
    Path((shop, order)): Path<(u32, u64)>,
    tx: &mut Transaction<'_, Sqlite>,
    Checked(new): Checked<NewOrder>,
) -> StatusCode {
    let _done = sqlx::query("UPDATE orders SET sku = ?1 WHERE shop = ?2 AND id = ?3")
        .bind(&new.sku)
        .bind(shop)
        .bind(i64::try_from(order).unwrap_or_default())
        .execute(&mut **tx)
        .await;
    StatusCode::NO_CONTENT
}

fn router(idem: Idem<Sqlite>) -> Router {
    Router::new()
        .route("/shops/{shop}/orders", post(create_order))
        .route("/shops/{shop}/orders/{order}", post(replace_order))
        .with_state(AppState { idem })
}

fn main() {
    let _: fn(Idem<Sqlite>) -> Router = router;
}
