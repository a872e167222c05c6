//! The operations a database knows: registered by the services that run them
//! ([`KeyTable::register`]) and seen in the key table ([`KeyTable::operations`]).

use crate::backend::Backend;
use crate::error::StoreError;
use crate::list::{Counts, StatusCounts};
use crate::table::KeyTable;

/// How a service runs one operation, as it registered it in `idempotency_operations`
/// ([`KeyTable::register`]): what tools show next to the operation's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The operation id, `<name>:v<version>`.
    pub operation: String,
    /// How keys are scoped: `global`, `tenant` or `user`.
    pub scope: String,
    /// How long a stored response is replayed, in milliseconds.
    pub ttl_ms: i64,
    /// `atomic` or `staged`.
    pub mode: String,
    /// Staged mode: the lease of a running attempt, in milliseconds.
    pub lease_ms: Option<i64>,
    /// When the service last registered it (milliseconds since the Unix epoch).
    pub registered_at_ms: i64,
    /// The operation's client contract as JSON (`idem-docs`' `OperationDoc`: its policy,
    /// route and handler), from which tools render its documentation; `None` when the
    /// service registered none.
    pub doc: Option<String>,
}

/// One operation, registered or seen in the key table ([`KeyTable::operations`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationInfo {
    /// The operation id.
    pub operation: String,
    /// Its keys by state (all zero for a registered operation without keys).
    pub counts: StatusCounts,
    /// How a service registered it; `None` for an operation only seen in the key table.
    pub registered: Option<Registration>,
}

impl<DB: Backend> KeyTable<DB> {
    /// Records how services run these operations in `idempotency_operations`, replacing
    /// what an earlier registration of the same operation id said. Services call it at
    /// start (`idem-runtime`'s `Idem::register`); the operator tool shows it.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty operation id or a mode other than
    /// `atomic` or `staged`; the database's errors.
    pub async fn register(&self, registrations: &[Registration]) -> Result<(), StoreError> {
        for registration in registrations {
            if registration.operation.is_empty() {
                return Err(StoreError::InvalidArgument(
                    "a registration needs an operation id".into(),
                ));
            }
            if !matches!(registration.mode.as_str(), "atomic" | "staged") {
                return Err(StoreError::InvalidArgument(format!(
                    "mode `{}`: expected atomic or staged",
                    registration.mode
                )));
            }
        }
        DB::register(self.pool(), registrations)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// Every operation registered or with keys, by operation id, with its keys counted by
    /// state at `now_ms` (one pass over the key table, as [`KeyTable::counts`]).
    ///
    /// # Errors
    /// The database's errors.
    pub async fn operations(&self, now_ms: i64) -> Result<Vec<OperationInfo>, StoreError> {
        let counts = self.counts(now_ms).await?;
        let registrations = self.registrations().await?;
        Ok(OperationInfo::merge(&counts, registrations))
    }

    /// Every registration in `idempotency_operations`, by operation id: what
    /// [`KeyTable::operations`] reads beside the counts, for a caller that has the counts
    /// already ([`OperationInfo::merge`]).
    ///
    /// # Errors
    /// The database's errors.
    pub async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        DB::registrations(self.pool())
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// How many keys [`KeyTable::sweep_batch`] with this `before_ms` would delete, in all
    /// its batches: completed keys whose `expires_at` is at or before `before_ms`.
    ///
    /// # Errors
    /// The database's errors.
    pub async fn count_sweepable(&self, before_ms: i64) -> Result<u64, StoreError> {
        DB::count_sweepable(self.pool(), before_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }
}

impl OperationInfo {
    /// The operations of `counts` ([`Counts::by_operation`]) and of `registrations`, by id:
    /// what [`KeyTable::operations`] returns, from counts read before.
    #[must_use]
    pub fn merge(counts: &Counts, registrations: Vec<Registration>) -> Vec<Self> {
        let mut counted = counts.by_operation.clone();
        let mut all: Vec<Self> = registrations
            .into_iter()
            .map(|registration| Self {
                operation: registration.operation.clone(),
                counts: counted.remove(&registration.operation).unwrap_or_default(),
                registered: Some(registration),
            })
            .collect();
        all.extend(counted.into_iter().map(|(operation, counts)| Self {
            operation,
            counts,
            registered: None,
        }));
        all.sort_by(|a, b| a.operation.cmp(&b.operation));
        all
    }
}

/// The registry's and the sweep count's methods of `sealed::Sealed`, the same Rust on every
/// backend: invoked inside each backend's impl, beside its `mod sql` (`COUNT_SWEEPABLE`,
/// `REGISTER`, `REGISTRATIONS`).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! operations_sql {
    () => {
        async fn count_sweepable(
            pool: &sqlx::Pool<Self>,
            before_ms: i64,
        ) -> Result<u64, $crate::StoreError> {
            let n: i64 = sqlx::query_scalar(sql::COUNT_SWEEPABLE)
                .bind(before_ms)
                .fetch_one(pool)
                .await?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        async fn register(
            pool: &sqlx::Pool<Self>,
            registrations: &[$crate::Registration],
        ) -> Result<(), $crate::StoreError> {
            let mut tx = pool.begin().await?;
            for r in registrations {
                sqlx::query(sql::REGISTER)
                    .bind(r.operation.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.ttl_ms)
                    .bind(r.mode.as_str())
                    .bind(r.lease_ms)
                    .bind(r.registered_at_ms)
                    .bind(r.doc.as_deref())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        async fn registrations(
            pool: &sqlx::Pool<Self>,
        ) -> Result<Vec<$crate::Registration>, $crate::StoreError> {
            type Raw = (
                String,
                String,
                i64,
                String,
                Option<i64>,
                Option<String>,
                i64,
            );
            let rows: Vec<Raw> = sqlx::query_as(sql::REGISTRATIONS).fetch_all(pool).await?;
            Ok(rows
                .into_iter()
                .map(
                    |(operation, scope, ttl_ms, mode, lease_ms, doc, registered_at_ms)| {
                        $crate::Registration {
                            operation,
                            scope,
                            ttl_ms,
                            mode,
                            lease_ms,
                            registered_at_ms,
                            doc,
                        }
                    },
                )
                .collect())
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use operations_sql;
