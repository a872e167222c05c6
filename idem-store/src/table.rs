//! [`KeyTable`]: the key table for tools.

use std::sync::Arc;

use sqlx::Pool;

use crate::backend::{Backend, begin_write};
use crate::error::StoreError;
use crate::glue::{Arg, Glue};
use crate::key::KeyRef;
use crate::list::{self, Counts, KeyFilter, Page};
use crate::list::{RawRow, ToolRow};
use crate::row::{KeyRow, KeyStatus};
use crate::seal::Keyring;
use crate::sql::Statement;

/// The key table of one database, for tools ([the example](crate#example)). Cheap to clone
/// (it holds a [`Pool`]). Methods that depend on the time take the caller's `now_ms`.
#[derive(Debug)]
pub struct KeyTable<DB: Backend> {
    pool: Pool<DB>,
    ring: Option<Arc<Keyring>>,
}

impl<DB: Backend> Clone for KeyTable<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            ring: self.ring.clone(),
        }
    }
}

impl<DB: Backend> KeyTable<DB> {
    /// The key table in `pool`'s database (PostgreSQL: in the schema the pool's sessions
    /// resolve unqualified names in).
    #[must_use]
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool, ring: None }
    }

    /// The table read and written with `ring`'s storage keys
    /// ([sealed at rest](crate#storage-sealed-at-rest)): sealed columns are opened where
    /// the keyring has their key, and what an operator writes is sealed. Without one,
    /// sealed columns are shown as sealed, and an operator's response on a sealed row may be
    /// a status alone (which replaces the sealed response): nothing clear is written over
    /// a sealed value.
    #[must_use]
    pub fn with_keyring(mut self, ring: Keyring) -> Self {
        self.ring = Some(Arc::new(ring));
        self
    }

    /// The storage keys, if the table was given them.
    #[must_use]
    pub fn keyring(&self) -> Option<&Keyring> {
        self.ring.as_deref()
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// [`crate::migrate`] on this table's pool.
    ///
    /// # Errors
    /// See [`crate::migrate`].
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::migrate(&self.pool).await
    }

    /// The row of `key`, with its state at `now_ms`, opened with the table's keyring where it
    /// is sealed ([`KeyRow::sealed`]); `None` if the key has no row.
    ///
    /// ```no_run
    /// # use idem_store::{KeyRef, KeyStatus, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "tenant:acme", operation: "create_order:v1", key: "order-1" };
    /// if let Some(row) = table.get(key, now_ms).await? {
    ///     let status = row.response.as_ref().map(|r| r.status);
    ///     println!("{} (stored {status:?}), expires at {}", row.status, row.expires_at_ms);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the row cannot be read (a sealed value that fails its
    /// check under a key of the keyring, too; one under a key it lacks reads as sealed);
    /// database errors.
    pub async fn get(&self, key: KeyRef<'_>, now_ms: i64) -> Result<Option<KeyRow>, StoreError> {
        async {
            let mut conn = self.pool.acquire().await?;
            let row = DB::fetch_optional(&mut conn, DB::SQL.tools.get, &Arg::key(key)).await?;
            row.map(|row| key_row::<DB>(&row, now_ms, self.keyring()))
                .transpose()
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// One page of the keys `filter` selects ([`KeyFilter`]), with their state at `now_ms`,
    /// read as [`KeyTable::get`] reads them.
    /// Each page is one indexed query after the previous page's [`Cursor`](crate::Cursor),
    /// however deep the listing goes.
    ///
    /// ```no_run
    /// # use idem_store::{KeyFilter, KeyStatus, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let mut filter = KeyFilter::new().status(KeyStatus::Expired).limit(500);
    /// loop {
    ///     let page = table.list(&filter, now_ms).await?;
    ///     for row in &page.keys {
    ///         println!("{} {} {}", row.scope, row.operation, row.key);
    ///     }
    ///     match page.next {
    ///         Some(next) => filter.after = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a row cannot be read; database errors.
    pub async fn list(&self, filter: &KeyFilter, now_ms: i64) -> Result<Page, StoreError> {
        self.list_on(filter, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// Sets `key`'s `expires_at` to `now_ms` (a key that expired earlier keeps its expiry);
    /// returns the row before and after, read in one transaction, or `None` if the key has no
    /// row. On a processing or stuck key it changes nothing: completing the key sets
    /// `expires_at` anew ([`KeyStatus`]). Neither fenced nor audited, unlike
    /// [`crate::Action::Expire`].
    ///
    /// ```no_run
    /// # use idem_store::{KeyRef, KeyStatus, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "global", operation: "sync:v1", key: "msg-7f3a" };
    /// match table.expire(key, now_ms).await? {
    ///     Some((before, after)) => {
    ///         assert_eq!(after.status, KeyStatus::Expired);
    ///         println!("{} → {}", before.status, after.status);
    ///     }
    ///     None => println!("no such key"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::LockTimeout`] when a running execution holds the row; database errors.
    pub async fn expire(
        &self,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> Result<Option<(KeyRow, KeyRow)>, StoreError> {
        async {
            let sql = DB::SQL;
            let mut conn = self.pool.acquire().await?;
            let mut tx = begin_write::<DB>(&mut conn).await?;
            let before =
                DB::fetch_optional(&mut tx, sql.tools.get_for_update, &Arg::key(key)).await?;
            // No row: dropping `tx` rolls back.
            let Some(before) = before else {
                return Ok(None);
            };
            let ring = self.keyring();
            let before = key_row::<DB>(&before, now_ms, ring)?;
            let now = [Arg::Int(now_ms)];
            let args = Arg::around_key(&now, key, &now);
            let after =
                write_key::<DB>(&mut tx, sql.tools.expire, &args, (key, now_ms, ring)).await?;
            // None: it had expired already, unchanged.
            let after = after.unwrap_or_else(|| before.clone());
            tx.commit().await?;
            Ok(Some((before, after)))
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// Deletes `key`'s row and returns it, with its state at `now_ms`; `None` if the key had
    /// no row. Neither fenced nor audited, unlike [`crate::Action::Delete`].
    ///
    /// ```no_run
    /// # use idem_store::{KeyRef, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "global", operation: "sync:v1", key: "msg-7f3a" };
    /// if let Some(row) = table.delete(key, now_ms).await? {
    ///     println!("deleted {} (it was {})", row.key, row.status);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::LockTimeout`] when a running execution holds the row; database errors;
    /// [`StoreError::Corrupt`] for a row that cannot be read, deleted all the same.
    pub async fn delete(&self, key: KeyRef<'_>, now_ms: i64) -> Result<Option<KeyRow>, StoreError> {
        async {
            let (sql, ring) = (DB::SQL, self.keyring());
            let mut conn = self.pool.acquire().await?;
            if DB::DIALECT.returning {
                let row = DB::fetch_optional(&mut conn, sql.tools.delete, &Arg::key(key)).await?;
                return row.map(|row| key_row::<DB>(&row, now_ms, ring)).transpose();
            }
            // The row read, then deleted, in one transaction holding it.
            let mut tx = begin_write::<DB>(&mut conn).await?;
            let row = DB::fetch_optional(&mut tx, sql.tools.get_for_update, &Arg::key(key)).await?;
            DB::execute(&mut tx, sql.operator.delete_only, &Arg::key(key)).await?;
            tx.commit().await?;
            // Read after the commit, as `RETURNING` does: an unreadable row is deleted too.
            row.map(|row| key_row::<DB>(&row, now_ms, ring)).transpose()
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// Deletes up to `batch` keys (at least 1) that expired ([`KeyStatus`]) at or before
    /// `before_ms`, in one short statement; returns how many. On PostgreSQL it skips rows
    /// another transaction holds (`FOR UPDATE SKIP LOCKED`). Call it again while it returns
    /// `batch`, pausing in between to leave the database's write capacity to requests.
    ///
    /// ```no_run
    /// # use idem_store::KeyTable;
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// // Keys that expired over a week ago, 1000 at a time.
    /// let before = now_ms - 7 * 24 * 3_600_000;
    /// let mut total = 0;
    /// loop {
    ///     let deleted = table.sweep_batch(before, 1000).await?;
    ///     total += deleted;
    ///     if deleted < 1000 {
    ///         break;
    ///     }
    ///     tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Database errors.
    pub async fn sweep_batch(&self, before_ms: i64, batch: u32) -> Result<u64, StoreError> {
        let args = [Arg::Int(before_ms), Arg::Int(i64::from(batch.max(1)))];
        async {
            let sql = DB::SQL;
            let mut conn = self.pool.acquire().await?;
            let deleted = DB::execute(&mut conn, sql.tools.sweep, &args).await?;
            // MySQL's lock rows too (the crate docs' section on MySQL).
            if let Some(sweep_locks) = sql.staged.sweep_locks {
                DB::execute(&mut conn, sweep_locks, &args).await?;
            }
            Ok(deleted)
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// How many keys are in each state at `now_ms`, overall and per operation, and how large
    /// the table is. Reads the whole table: meant for operators, not for every request.
    ///
    /// ```no_run
    /// # async fn demo<DB: idem_store::Backend>(table: idem_store::KeyTable<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let counts = table.counts(now_ms).await?;
    /// println!("{} keys, {} expired", counts.by_status.total(), counts.by_status.expired);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Database errors.
    pub async fn counts(&self, now_ms: i64) -> Result<Counts, StoreError> {
        async {
            let mut conn = self.pool.acquire().await?;
            let now = [Arg::Int(now_ms), Arg::Int(now_ms)];
            let rows = DB::fetch_all(&mut conn, DB::SQL.tools.counts, &now).await?;
            let mut counts = Counts::default();
            for row in &rows {
                counts.add(
                    DB::text(row, 0)?,
                    list::counted_status(&DB::text(row, 1)?)?,
                    list::count(DB::int(row, 2)?),
                    DB::opt_int(row, 3)?,
                );
            }
            counts.table_bytes = table_bytes::<DB>(&mut conn).await?.map(list::count);
            Ok(counts)
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// [`KeyTable::list`]: the listing's statement, its filters bound as they are added.
    async fn list_on(&self, filter: &KeyFilter, now_ms: i64) -> Result<Page, StoreError> {
        let limit = filter.effective_limit();
        let prefix = filter.key_prefix.as_deref().map(DB::key_prefix);
        let mut query = Statement::new(DB::SQL.tools.list, DB::DIALECT.positional);
        // The state's filter first: its time is the statement's first parameter.
        let state = match filter.status {
            None => None,
            Some(KeyStatus::Completed) => Some(DB::SQL.tools.list_completed),
            Some(KeyStatus::Expired) => Some(DB::SQL.tools.list_expired),
            Some(KeyStatus::Processing) => Some(DB::SQL.tools.list_processing),
            Some(KeyStatus::Stuck) => Some(DB::SQL.tools.list_stuck),
        };
        if let Some(state) = state {
            query.push(" ").push(state);
            query.args.push(Arg::Int(now_ms));
        }
        if let Some(operation) = &filter.operation {
            query.push(" AND operation = ").bind(Arg::Text(operation));
        }
        if let Some(scope) = &filter.scope {
            query.push(" AND scope = ").bind(Arg::Text(scope));
        }
        if let Some((before, after, pattern)) = &prefix {
            query.push(before).bind(Arg::Text(pattern)).push(after);
        }
        if let Some(after) = &filter.after {
            let after = after.key();
            query.push(" AND (scope, operation, idempotency_key) > (");
            query.bind(Arg::Text(after.scope)).push(", ");
            query.bind(Arg::Text(after.operation)).push(", ");
            query.bind(Arg::Text(after.key)).push(")");
        }
        query.push(" ORDER BY scope, operation, idempotency_key LIMIT ");
        query.bind(Arg::Int(i64::from(limit) + 1));
        let mut conn = self.pool.acquire().await?;
        let rows = DB::fetch_all(&mut conn, &query.sql, &query.args).await?;
        let rows = rows
            .iter()
            .map(tool_row::<DB>)
            .collect::<Result<Vec<_>, _>>()?;
        list::page_of(rows, limit, now_ms, self.keyring())
    }
}

/// A key row's columns, in the order of [`RawRow`]'s fields.
pub(crate) fn raw_row<DB: Glue>(row: &DB::Row) -> Result<RawRow, sqlx::Error> {
    Ok(RawRow {
        scope: DB::text(row, 0)?,
        operation: DB::text(row, 1)?,
        key: DB::text(row, 2)?,
        fingerprint: DB::bytes(row, 3)?,
        status: DB::text(row, 4)?,
        response_status: DB::opt_int32(row, 5)?,
        response_headers: DB::opt_text(row, 6)?,
        response_body: DB::opt_bytes(row, 7)?,
        created_at_ms: DB::int(row, 8)?,
        completed_at_ms: DB::opt_int(row, 9)?,
        expires_at_ms: DB::int(row, 10)?,
        locked_until_ms: DB::opt_int(row, 11)?,
        attempt: DB::int(row, 12)?,
        recovery_point: DB::opt_text(row, 13)?,
    })
}

/// A key row as the tools' statements read it: [`RawRow`]'s columns, then `reservation`.
fn tool_row<DB: Glue>(row: &DB::Row) -> Result<ToolRow, sqlx::Error> {
    Ok(ToolRow {
        columns: raw_row::<DB>(row)?,
        reservation: DB::opt_int(row, 14)?,
    })
}

/// Runs `statement`, a write of `key`'s row ending in `{returning {key_columns}}`, and reads
/// the row as it left it at `now_ms`, opened with `ring`: from the statement, or, where
/// writes return nothing (MySQL), again in the caller's transaction. `None`: the write
/// changed no row.
pub(crate) async fn write_key<DB: Backend>(
    conn: &mut DB::Connection,
    statement: &str,
    args: &[Arg<'_>],
    (key, now_ms, ring): (KeyRef<'_>, i64, Option<&Keyring>),
) -> Result<Option<KeyRow>, StoreError> {
    let row = if DB::DIALECT.returning {
        DB::fetch_optional(conn, statement, args).await?
    } else if DB::execute(conn, statement, args).await? > 0 {
        DB::fetch_optional(conn, DB::SQL.tools.get, &Arg::key(key)).await?
    } else {
        None
    };
    row.map(|row| key_row::<DB>(&row, now_ms, ring)).transpose()
}

/// A key row as tools read it at `now_ms`, opened with `ring` ([`KeyRow`]).
pub(crate) fn key_row<DB: Glue>(
    row: &DB::Row,
    now_ms: i64,
    ring: Option<&Keyring>,
) -> Result<KeyRow, StoreError> {
    tool_row::<DB>(row)?.into_row(now_ms, ring)
}

/// The key table's size on disk with its indexes, where the database can tell (SQLite:
/// where it was built with `dbstat`).
async fn table_bytes<DB: Backend>(conn: &mut DB::Connection) -> Result<Option<i64>, sqlx::Error> {
    match DB::fetch_optional(conn, DB::SQL.tools.table_bytes, &[]).await {
        Ok(row) => Ok(row.map(|row| DB::opt_int(&row, 0)).transpose()?.flatten()),
        // SQLite built without `dbstat`: its one statement fails as SQLITE_ERROR (1), the
        // code of a table it does not know (no other store answers a bare `1`).
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("1") => Ok(None),
        Err(error) => Err(error),
    }
}
