//! Opening a store's pool, and what a process asks of it once.

use sqlx::Pool;
use sqlx::pool::PoolOptions;

use crate::backend::Backend;
use crate::glue::Wire;
use crate::protocol::TxSettings;

/// `namespace`: ask once per process and pass it in every [`KeyLock`](crate::KeyLock).
pub async fn namespace<DB: Backend>(conn: &mut DB::Connection) -> Result<String, sqlx::Error> {
    let Some(sql) = DB::SQL.keys.namespace else {
        return Ok(String::new());
    };
    let row = DB::fetch_optional(conn, sql, &[]).await?;
    let name = row.map(|row| DB::opt_text(&row, 0)).transpose()?;
    Ok(name.flatten().unwrap_or_default())
}

/// Opens a pool on `url` with the store's [`connect_options`](crate::Backend::connect_options) and
/// [`pool_options`](crate::Backend::pool_options) ([`open`](crate::Backend::open)). Connections are pinged before use only on PostgreSQL, after
/// [`crate::IDLE_PING_AFTER`] idle.
pub async fn connect<DB: Backend>(
    url: &str,
    max_connections: u32,
    settings: &TxSettings,
) -> Result<Pool<DB>, sqlx::Error> {
    let pool = PoolOptions::<DB>::new()
        .max_connections(max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // A dead connection fails its query (answered 503, retry with the same key; the
        // runtime retries a read-only lookup) instead of costing every request a ping.
        .test_before_acquire(false);
    DB::open(url, DB::pool_options(pool), settings).await
}

/// Whether two connections of `pool`, open at once, met the same server session
/// (`session_id`, asked one after the other outside a transaction): `true` proves
/// a transaction pooler in between; `false` proves nothing.
pub async fn shared_sessions<DB: Backend>(pool: &Pool<DB>) -> Result<bool, sqlx::Error> {
    let Some(sql) = DB::SQL.keys.session_id else {
        return Ok(false);
    };
    if pool.options().get_max_connections() < 2 {
        return Ok(false);
    }
    let (mut first, mut second) = (pool.acquire().await?, pool.acquire().await?);
    let mut ids = Vec::with_capacity(2);
    for conn in [&mut *first, &mut *second] {
        // As a simple query: a prepared one could meet another client's statement names.
        let row = DB::fetch_optional_on(Wire::Literal, conn, sql, &[]).await?;
        ids.push(row.map(|row| DB::int(&row, 0)).transpose()?);
    }
    Ok(ids[0].is_some() && ids[0] == ids[1])
}
