//! [`Sealed`]: the supertrait that seals [`crate::Backend`].

use std::future::Future;

use sqlx::{Database, Pool};

use crate::error::StoreError;
use crate::{
    Acted, Action, Actor, AuditEntry, AuditFilter, Counts, Journal, KeyFilter, KeyRef, KeyRow,
    Page, Registration,
};

/// The bodies of [`crate::KeyTable`]'s methods, per backend. Not nameable outside the
/// crate, which seals [`crate::Backend`].
pub trait Sealed: Database {
    fn run_migrations(pool: &Pool<Self>) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn get(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<KeyRow>, StoreError>> + Send;

    fn list(
        pool: &Pool<Self>,
        filter: &KeyFilter,
        now_ms: i64,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send;

    fn expire(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<(KeyRow, KeyRow)>, StoreError>> + Send;

    fn delete(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<KeyRow>, StoreError>> + Send;

    fn sweep_batch(
        pool: &Pool<Self>,
        before_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    fn counts(
        pool: &Pool<Self>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Counts, StoreError>> + Send;

    /// [`crate::KeyTable::act`], its arguments validated: one transaction holding the
    /// key's row reads it, checks it (`operator::check`), applies `action` and inserts
    /// the audit row.
    fn act(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        expected: &KeyRow,
        action: &Action,
        by: &Actor,
        now_ms: i64,
    ) -> impl Future<Output = Result<Acted, StoreError>> + Send;

    fn audit(
        pool: &Pool<Self>,
        filter: &AuditFilter,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;

    fn read_journal(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<Option<Journal>, StoreError>> + Send;

    fn count_sweepable(
        pool: &Pool<Self>,
        before_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Upserts each registration, in one transaction.
    fn register(
        pool: &Pool<Self>,
        registrations: &[Registration],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every registration, by operation id.
    fn registrations(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Vec<Registration>, StoreError>> + Send;
}
