//! [`StoreError`]: everything that can go wrong in this crate.

/// What went wrong with the key table or the outbox: the one error type of
/// [`crate::KeyTable`], [`crate::Outbox`] and the migration runner.
///
/// The protocol's primitives on [`crate::Backend`] return [`sqlx::Error`] instead: the
/// runtime tells their errors apart itself ([`crate::Backend::classify`]) and keeps the raw
/// error in its own (a failed `COMMIT` is not a failed `BEGIN`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A lock wait ran out (PostgreSQL `lock_timeout` or `statement_timeout`, SQLite
    /// `busy_timeout`): another transaction holds what the statement needed. Worth retrying.
    #[error("the key table is locked by another transaction: {0}")]
    LockTimeout(#[source] sqlx::Error),
    /// The database or the connection failed.
    #[error("the key table's database failed: {0}")]
    Database(#[source] sqlx::Error),
    /// A migration of the key table could not be applied, or one that was applied is not the
    /// one this version of idem knows.
    #[error("key table migration {version}: {reason}")]
    Migrate {
        /// The migration's version (`idem_schema_migrations.version`).
        version: i64,
        /// What is wrong.
        reason: String,
        /// The database's error, when there was one.
        #[source]
        source: Option<sqlx::Error>,
    },
    /// A [`crate::Cursor`] that is not one [`crate::KeyTable::list`] returned.
    #[error("invalid cursor: not one returned by a listing of keys")]
    InvalidCursor,
    /// A string that is not a [`crate::KeyStatus`] (`completed`, `processing`, `stuck`,
    /// `expired`).
    #[error("unknown key status `{0}`: expected completed, processing, stuck or expired")]
    InvalidStatus(String),
    /// An argument the store refuses before touching the database: an operator action
    /// without an operator name, a [`crate::Action::Fail`] whose response is not a failure,
    /// an expected row of another key.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// [`crate::KeyTable::act`] found the key's row other than the caller last saw it (or
    /// gone): someone or something (the running attempt, a retry, the reconciler, another
    /// operator) changed it meanwhile. Nothing was changed and nothing audited; look at
    /// `current` and decide again.
    #[error("the key changed since it was read: look at it again")]
    Changed {
        /// The row as it is now, read under the same lock; `None` when it was deleted.
        current: Option<Box<crate::KeyRow>>,
    },
    /// [`crate::KeyTable::act`]: the action does not apply to the key in its current state
    /// (releasing a completed key, expiring an expired one, …). Nothing was changed and
    /// nothing audited.
    #[error("not applicable: {0}")]
    NotApplicable(String),
    /// [`crate::KeyTable::act`]: the action applies to the key but could do harm now (see
    /// [`crate::Hazard`]: an attempt holds the key's live lease, or deleting a completed staged
    /// key would let its steps run again), so it is refused unless the actor forces it
    /// ([`crate::Actor::force`]). Nothing was changed and nothing audited.
    #[error("refused: {action}: {hazard}; a forced action overrides this")]
    NeedsForce {
        /// The action refused ([`crate::Action::name`]).
        action: &'static str,
        /// Why.
        hazard: crate::Hazard,
    },
    /// A string that is not an [`crate::OutboxStatus`] (`pending`, `delivered`, `dead`).
    #[error("unknown outbox status `{0}`: expected pending, delivered or dead")]
    InvalidOutboxStatus(String),
    /// A key row or outbox message this version cannot read (a status it does not know, a
    /// response status out of range, response headers that are not a JSON array of pairs, a
    /// payload that is not JSON, …).
    #[error("unreadable row: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether a lock wait ran out ([`StoreError::LockTimeout`]): retrying later may work.
    #[must_use]
    pub fn is_lock_timeout(&self) -> bool {
        matches!(self, Self::LockTimeout(_))
    }

    /// Whether an operator action was refused because the key changed since it was read
    /// ([`StoreError::Changed`]): look again, then act again if it still makes sense.
    #[must_use]
    pub fn is_changed(&self) -> bool {
        matches!(self, Self::Changed { .. })
    }

    /// Whether an operator action was refused because it could do harm now, and forcing it
    /// would apply it ([`StoreError::NeedsForce`]).
    #[must_use]
    pub fn needs_force(&self) -> bool {
        matches!(self, Self::NeedsForce { .. })
    }

    /// Whether this is a failed or refused migration ([`StoreError::Migrate`]).
    #[must_use]
    pub fn is_migrate(&self) -> bool {
        matches!(self, Self::Migrate { .. })
    }

    /// The database's error underneath, if any.
    #[must_use]
    pub fn as_sqlx(&self) -> Option<&sqlx::Error> {
        match self {
            Self::LockTimeout(e) | Self::Database(e) => Some(e),
            Self::Migrate { source, .. } => source.as_ref(),
            Self::InvalidCursor
            | Self::InvalidStatus(_)
            | Self::InvalidArgument(_)
            | Self::Changed { .. }
            | Self::NotApplicable(_)
            | Self::NeedsForce { .. }
            | Self::InvalidOutboxStatus(_)
            | Self::Corrupt(_) => None,
        }
    }

    /// A migration that failed on the database.
    pub(crate) fn migration_failed(version: i64, error: sqlx::Error) -> Self {
        Self::Migrate {
            version,
            reason: format!("could not be applied: {error}"),
            source: Some(error),
        }
    }

    /// Tells lock timeouts apart from other database errors, the way `DB` reports them.
    pub(crate) fn refine<DB: crate::Backend>(self) -> Self {
        match self {
            Self::Database(error) if DB::classify(&error) == crate::Failure::LockTimeout => {
                Self::LockTimeout(error)
            }
            other => other,
        }
    }
}

/// Every database error is [`StoreError::Database`] at first; [`crate::KeyTable`] then tells
/// lock timeouts apart.
impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}
