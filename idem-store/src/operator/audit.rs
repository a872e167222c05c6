//! The audit trail: which entries [`KeyTable::audit`] returns ([`AuditFilter`]), and what
//! one records ([`AuditEntry`]).

use serde_json::Value;
use sqlx::Pool;

use crate::backend::Backend;
use crate::error::StoreError;
use crate::glue::Arg;
use crate::key::KeyRef;
use crate::sql::Statement;
use crate::table::KeyTable;

/// Which entries of the audit trail [`KeyTable::audit`] returns; filters combine with AND.
///
/// ```
/// use idem_store::{AuditFilter, KeyRef};
///
/// let key = KeyRef { scope: "tenant:acme", operation: "create_order:v1", key: "order-1" };
/// let filter = AuditFilter::new().key(key).operator("alice").limit(20);
/// assert_eq!(filter.effective_limit(), 20);
/// assert_eq!(AuditFilter::new().effective_limit(), AuditFilter::DEFAULT_LIMIT);
/// assert_eq!(AuditFilter::new().limit(5000).effective_limit(), AuditFilter::MAX_LIMIT);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditFilter {
    /// Only actions on keys of this scope.
    pub scope: Option<String>,
    /// Only actions on keys of this operation id.
    pub operation: Option<String>,
    /// Only actions on this client key (exact; one key's history: [`AuditFilter::key`]).
    pub key: Option<String>,
    /// Only actions by this operator (exact).
    pub operator: Option<String>,
    /// Only entries older than this one (`id` below it): the last [`AuditEntry::id`] of the
    /// previous page.
    pub before_id: Option<i64>,
    /// Entries at most, within the bounds of [`AuditFilter::effective_limit`].
    pub limit: u32,
}

impl Default for AuditFilter {
    fn default() -> Self {
        Self {
            scope: None,
            operation: None,
            key: None,
            operator: None,
            before_id: None,
            limit: Self::DEFAULT_LIMIT,
        }
    }
}

impl AuditFilter {
    /// Entries returned unless [`AuditFilter::limit`] says otherwise.
    pub const DEFAULT_LIMIT: u32 = 100;
    /// The most entries one call returns; larger limits are lowered to this.
    pub const MAX_LIMIT: u32 = 1000;

    /// The newest [`AuditFilter::DEFAULT_LIMIT`] entries, of every key and operator.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the actions on `key`: sets [`AuditFilter::scope`], [`AuditFilter::operation`]
    /// and [`AuditFilter::key`].
    #[must_use]
    pub fn key(mut self, key: KeyRef<'_>) -> Self {
        self.scope = Some(key.scope.to_owned());
        self.operation = Some(key.operation.to_owned());
        self.key = Some(key.key.to_owned());
        self
    }

    /// Sets [`AuditFilter::operator`].
    #[must_use]
    pub fn operator(mut self, operator: impl Into<String>) -> Self {
        self.operator = Some(operator.into());
        self
    }

    /// Sets [`AuditFilter::before_id`].
    #[must_use]
    pub fn before_id(mut self, id: i64) -> Self {
        self.before_id = Some(id);
        self
    }

    /// Sets [`AuditFilter::limit`].
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// The number of entries returned at most: [`AuditFilter::limit`] within
    /// `1..=`[`AuditFilter::MAX_LIMIT`].
    #[must_use]
    pub fn effective_limit(&self) -> u32 {
        self.limit.clamp(1, Self::MAX_LIMIT)
    }
}

/// One operator action, as the audit trail `idempotency_audit` records it.
///
/// [`AuditEntry::before`] and [`AuditEntry::after`] are the key's row as JSON objects (an
/// outbox message's, for [`Outbox::retry`](crate::Outbox::retry)):
///
/// ```json
/// {
///   "scope": "tenant:acme", "operation": "create_order:v1", "key": "order-1",
///   "status": "completed", "attempt": 3,
///   "locked_until_ms": null, "recovery_point": "charge",
///   "created_at_ms": 1800000000000, "expires_at_ms": 1800086400000,
///   "completed_at_ms": 1800000360000,
///   "fingerprint": "9f86d0…",
///   "response": {"status": 201, "headers": [["content-type", "application/json"]],
///                "body": "{\"id\":7}"},
///   "sealed": null
/// }
/// ```
///
/// `status` is the key's state ([`KeyStatus`](crate::KeyStatus)) at the action's time;
/// `fingerprint` is hexadecimal; `response` is `null` for a row without one. A body that is
/// not UTF-8 is `body_hex`, its bytes in lowercase hexadecimal, instead of `body`. `sealed`
/// is `null` for a clear row.
///
/// The audit trail never holds what a row holds sealed
/// ([sealed at rest](crate#storage-sealed-at-rest)), whether or not the acting table has
/// the storage keys: a row whose fingerprint or response is sealed
/// ([`KeyRow::sealed`](crate::KeyRow::sealed)), and both rows of a `reseal`
/// ([`KeyTable::reseal`]), are recorded without `fingerprint` and with the response's
/// `status` only, `sealed` naming the key that sealed the row (`null` for the clear row a
/// reseal sealed):
///
/// ```json
/// {
///   "scope": "tenant:acme", "operation": "create_order:v1", "key": "order-1",
///   "status": "completed", "attempt": 0,
///   "locked_until_ms": null, "recovery_point": null,
///   "created_at_ms": 1800000000000, "expires_at_ms": 1800086400000,
///   "completed_at_ms": 1800000000040,
///   "response": {"status": 201}, "sealed": "k2"
/// }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// `idempotency_audit.id`: grows with every entry.
    pub id: i64,
    /// When the action happened, by the acting tool's clock.
    pub at_ms: i64,
    /// Who acted ([`Actor::operator`](super::Actor::operator)).
    pub operator: String,
    /// The key's scope.
    pub scope: String,
    /// The key's operation id.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// [`Action::name`](super::Action::name), `reseal` ([`KeyTable::reseal`]), or
    /// `outbox-retry`.
    pub action: String,
    /// Why ([`Actor::reason`](super::Actor::reason)).
    pub reason: Option<String>,
    /// The row before the action.
    pub before: Option<Value>,
    /// The row after the action; `None` after `delete`.
    pub after: Option<Value>,
    /// Whether the action was applied only because it was forced
    /// ([`Actor::forced`](super::Actor::forced)) over a [`Hazard`](crate::Hazard); an
    /// actor's force that overrode nothing is not recorded.
    pub forced: bool,
}

impl<DB: Backend> KeyTable<DB> {
    /// The entries of the audit trail `filter` selects, newest first ([`AuditEntry::id`]).
    ///
    /// ```no_run
    /// # use idem_store::{AuditFilter, KeyRef, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "global", operation: "sync:v1", key: "msg-7f3a" };
    /// for entry in table.audit(&AuditFilter::new().key(key)).await? {
    ///     println!("#{} {} {} by {}: {:?}", entry.id, entry.at_ms, entry.action, entry.operator, entry.reason);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when an entry's `before` or `after` is not JSON; database errors.
    pub async fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        audit::<DB>(self.pool(), filter)
            .await
            .map_err(StoreError::refine::<DB>)
    }
}

/// [`KeyTable::audit`].
async fn audit<DB: Backend>(
    pool: &Pool<DB>,
    filter: &AuditFilter,
) -> Result<Vec<AuditEntry>, StoreError> {
    let mut query = Statement::new(DB::SQL.operator.audit, DB::DIALECT.positional);
    for (column, value) in [
        ("scope", &filter.scope),
        ("operation", &filter.operation),
        ("idempotency_key", &filter.key),
        ("operator", &filter.operator),
    ] {
        if let Some(value) = value {
            query
                .push(" AND ")
                .push(column)
                .push(" = ")
                .bind(Arg::Text(value));
        }
    }
    if let Some(id) = filter.before_id {
        query.push(" AND id < ").bind(Arg::Int(id));
    }
    query.push(" ORDER BY id DESC LIMIT ");
    query.bind(Arg::Int(i64::from(filter.effective_limit())));
    let mut conn = pool.acquire().await?;
    let rows = DB::fetch_all(&mut conn, &query.sql, &query.args).await?;
    let entry = |row: &DB::Row| -> Result<AuditEntry, StoreError> {
        let id = DB::int(row, 0)?;
        let json = |what: &str, i: usize| -> Result<Option<Value>, StoreError> {
            let text = DB::opt_text(row, i)?;
            (text.map(|text| serde_json::from_str(&text)).transpose()).map_err(|e| {
                StoreError::Corrupt(format!("audit entry {id}: {what} is not JSON: {e}"))
            })
        };
        Ok(AuditEntry {
            id,
            at_ms: DB::int(row, 1)?,
            operator: DB::text(row, 2)?,
            scope: DB::text(row, 3)?,
            operation: DB::text(row, 4)?,
            key: DB::text(row, 5)?,
            action: DB::text(row, 6)?,
            reason: DB::opt_text(row, 7)?,
            before: json("before", 8)?,
            after: json("after", 9)?,
            forced: DB::flag(row, 10)?,
        })
    };
    rows.iter().map(entry).collect()
}
