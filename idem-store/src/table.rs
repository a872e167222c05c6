//! [`KeyTable`]: the key table for tools.

use sqlx::Pool;

use crate::backend::Backend;
use crate::error::StoreError;
use crate::key::KeyRef;
use crate::list::{Counts, KeyFilter, Page};
use crate::row::KeyRow;

/// The key table of one database, for tools: the operator CLI, tests, the runtime's sweeper.
/// Cheap to clone (it holds a [`Pool`]).
///
/// The store never reads the clock: every method that depends on the time takes `now_ms`,
/// milliseconds since the Unix epoch, from the caller (the runtime's injected clock, say).
///
/// ```no_run
/// # #[cfg(feature = "sqlite")] mod example {
/// use idem_store::KeyTable;
/// use sqlx::sqlite::SqlitePool;
///
/// # async fn demo(now_ms: i64) -> Result<(), Box<dyn std::error::Error>> {
/// let table = KeyTable::new(SqlitePool::connect("sqlite://app.db").await?);
/// let counts = table.counts(now_ms).await?;
/// println!("{} keys, {} expired", counts.by_status.total(), counts.by_status.expired);
/// # Ok(()) }
/// # }
/// ```
#[derive(Debug)]
pub struct KeyTable<DB: Backend> {
    pool: Pool<DB>,
}

impl<DB: Backend> Clone for KeyTable<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Backend> KeyTable<DB> {
    /// The key table in `pool`'s database (PostgreSQL: in the schema the pool's sessions
    /// resolve unqualified names in).
    #[must_use]
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool }
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates or updates the key table: [`crate::migrate`] on this table's pool.
    ///
    /// # Errors
    /// See [`crate::migrate`].
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::migrate(&self.pool).await
    }

    /// The row of `key`, with its state at `now_ms`; `None` if the key has no row.
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
    /// [`StoreError::Corrupt`] when the row cannot be read; database errors.
    pub async fn get(&self, key: KeyRef<'_>, now_ms: i64) -> Result<Option<KeyRow>, StoreError> {
        DB::get(&self.pool, key, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// One page of the keys `filter` selects, in (scope, operation, key) order, with their
    /// state at `now_ms`.
    ///
    /// Pages are read with keyset pagination: each page is one indexed query after the last
    /// key of the previous page, however deep the listing goes, and keys inserted or deleted
    /// meanwhile neither shift nor duplicate the others.
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
        DB::list(&self.pool, filter, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// Expires `key` now: sets its `expires_at` to `now_ms` (a key that had expired earlier
    /// keeps its earlier expiry). Returns the row before and after, read in the same
    /// transaction; `None` if the key has no row.
    ///
    /// An expired key answers `410`, or runs again for operations that re-execute expired
    /// keys, and the sweeper deletes it once its grace period is over. Only a completed key
    /// expires ([`crate::KeyStatus::at`]): on a processing or stuck key the new `expires_at`
    /// changes nothing, and completing the key sets it anew.
    ///
    /// Neither fenced nor audited: operators act through [`KeyTable::act`] with
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
        DB::expire(&self.pool, key, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// Deletes `key`'s row and returns it, with its state at `now_ms`; `None` if the key had
    /// no row.
    ///
    /// The key is unknown afterwards: the next request with it runs as a first one.
    ///
    /// Neither fenced nor audited: operators act through [`KeyTable::act`] with
    /// [`crate::Action::Delete`].
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
    /// [`StoreError::LockTimeout`] when a running execution holds the row; database errors.
    /// A row that cannot be read is deleted all the same, and reported as
    /// [`StoreError::Corrupt`].
    pub async fn delete(&self, key: KeyRef<'_>, now_ms: i64) -> Result<Option<KeyRow>, StoreError> {
        DB::delete(&self.pool, key, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// Deletes up to `batch` keys (at least 1) that expired at or before `before_ms` —
    /// completed rows whose `expires_at` is at or before it; a processing key is never
    /// deleted, whatever its `expires_at` ([`crate::KeyStatus::at`]) — in one short
    /// statement; returns how many. On PostgreSQL it skips rows another transaction
    /// holds (`FOR UPDATE SKIP LOCKED`). Call it again while it returns `batch`, pausing in
    /// between to leave the database's write capacity to requests.
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
        DB::sweep_batch(&self.pool, before_ms, i64::from(batch.max(1)))
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// How many keys are in each state at `now_ms`, overall and per operation, and how large
    /// the table is. Reads the whole table: meant for operators, not for every request.
    ///
    /// # Errors
    /// Database errors.
    pub async fn counts(&self, now_ms: i64) -> Result<Counts, StoreError> {
        DB::counts(&self.pool, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }
}
