//! The operations a database knows: registered by the services that run them
//! ([`KeyTable::register`]) and seen in the key table ([`KeyTable::operations`]).

use idem_spec::{Mode, ScopeKind};
use sqlx::Transaction;

use crate::backend::Backend;
use crate::error::StoreError;
use crate::glue::Arg;
use crate::list::{Counts, StatusCounts};
use crate::table::KeyTable;

/// How a service runs one operation ([`KeyTable::register`]): what tools show by its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The operation id, `<name>:v<version>`.
    pub operation: String,
    /// How keys are scoped.
    pub scope: ScopeKind,
    /// How long a stored response is replayed, in milliseconds.
    pub ttl_ms: i64,
    /// How it executes.
    pub mode: Mode,
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
    /// Writes these registrations to [the operation registry](crate#the-operation-registry),
    /// each replacing an earlier one of the same operation id.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty operation id; the database's errors.
    pub async fn register(&self, registrations: &[Registration]) -> Result<(), StoreError> {
        for registration in registrations {
            if registration.operation.is_empty() {
                return Err(StoreError::InvalidArgument(
                    "a registration needs an operation id".into(),
                ));
            }
        }
        async {
            let mut conn = self.pool().acquire().await?;
            let mut tx = Transaction::<DB>::begin(&mut *conn, None).await?;
            for r in registrations {
                let args = [
                    Arg::Text(&r.operation),
                    Arg::Text(r.scope.as_str()),
                    Arg::Int(r.ttl_ms),
                    Arg::Text(r.mode.as_str()),
                    Arg::OptInt(r.lease_ms),
                    Arg::OptText(r.doc.as_deref()),
                    Arg::Int(r.registered_at_ms),
                ];
                DB::execute(&mut tx, DB::SQL.tools.register, &args).await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(())
        }
        .await
        .map_err(|e: sqlx::Error| StoreError::from(e).refine::<DB>())
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

    /// Every registration, by operation id (for [`OperationInfo::merge`]).
    ///
    /// # Errors
    /// The database's errors.
    pub async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        async {
            let mut conn = self.pool().acquire().await?;
            let rows = DB::fetch_all(&mut conn, DB::SQL.tools.registrations, &[]).await?;
            rows.iter()
                .map(|row| {
                    Ok(Registration {
                        operation: DB::text(row, 0)?,
                        scope: word(DB::text(row, 1)?)?,
                        ttl_ms: DB::int(row, 2)?,
                        mode: word(DB::text(row, 3)?)?,
                        lease_ms: DB::opt_int(row, 4)?,
                        doc: DB::opt_text(row, 5)?,
                        registered_at_ms: DB::int(row, 6)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
        }
        .await
        .map_err(|e: sqlx::Error| StoreError::from(e).refine::<DB>())
    }

    /// How many keys [`KeyTable::sweep_batch`] with this `before_ms` would delete, all batches.
    ///
    /// # Errors
    /// The database's errors.
    pub async fn count_sweepable(&self, before_ms: i64) -> Result<u64, StoreError> {
        async {
            let mut conn = self.pool().acquire().await?;
            let sql = DB::SQL.tools.count_sweepable;
            let row = DB::fetch_optional(&mut conn, sql, &[Arg::Int(before_ms)]).await?;
            let n = row.map(|row| DB::int(&row, 0)).transpose()?.unwrap_or(0);
            Ok(u64::try_from(n).unwrap_or(0))
        }
        .await
        .map_err(|e: sqlx::Error| StoreError::from(e).refine::<DB>())
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

/// A word of idem-spec's vocabulary as a registration stored it; one this version does not
/// know (written by a newer version) fails the reading as a decoding error.
fn word<W: std::str::FromStr<Err = idem_spec::UnknownWord>>(
    text: String,
) -> Result<W, sqlx::Error> {
    text.parse()
        .map_err(|e: idem_spec::UnknownWord| sqlx::Error::Decode(Box::new(e)))
}
