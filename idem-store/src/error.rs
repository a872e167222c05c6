//! [`StoreError`]: everything that can go wrong in this crate.

use crate::backend::Backend;
use crate::protocol::Failure;
use crate::row::{KeyRow, KeyStatus};

/// What went wrong: the one error type of [`crate::KeyTable`], [`crate::Outbox`] and the
/// migration runner; the protocol's primitives return [`sqlx::Error`] ([errors](crate#errors)).
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
    /// A string that is not a [`crate::KeyStatus`] ([`crate::KeyStatus::as_str`]).
    #[error("unknown key status `{0}`: expected completed, processing, stuck or expired")]
    InvalidStatus(String),
    /// An argument the store refuses before touching the database (see each method's errors).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// [`crate::KeyTable::act`] found the key's row changed since the caller read it, or gone
    /// ([operator actions](crate#operator-actions)): look at `current` and decide again.
    #[error("the key changed since it was read: look at it again")]
    Changed {
        /// The row as it is now, read under the same lock; `None` when it was deleted.
        current: Option<Box<KeyRow>>,
    },
    /// An operator action ([`crate::KeyTable::act`], [`crate::Outbox::retry`]) that does not
    /// apply to the row in its current state: which reason, with its data.
    #[error("not applicable: {0}")]
    NotApplicable(NotApplicable),
    /// [`crate::KeyTable::act`]: the action could do harm now ([`Hazard`]); forcing it
    /// ([`crate::Actor::force`]) applies it.
    #[error("refused: {action}: {hazard}; a forced action overrides this")]
    NeedsForce {
        /// The action refused ([`crate::Action::name`]).
        action: &'static str,
        /// Why.
        hazard: Hazard,
    },
    /// What needs the storage keys ([`crate::KeyTable::with_keyring`]) was asked of a table
    /// without them, or without the key a value is sealed under
    /// ([sealed at rest](crate#storage-sealed-at-rest)): an operator's response with
    /// headers or a body for a sealed row ([`crate::Action::Complete`]), a reseal
    /// ([`crate::KeyTable::reseal`], [`crate::Outbox::reseal`], [`crate::Inbox::reseal`]),
    /// sealed field digests
    /// ([`crate::KeyTable::field_digests`]). Nothing was changed. The message names the
    /// key, never a value.
    #[error("needs the storage keys: {0}")]
    NeedsStorageKeys(String),
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

    /// Whether the key changed since it was read ([`StoreError::Changed`]).
    #[must_use]
    pub fn is_changed(&self) -> bool {
        matches!(self, Self::Changed { .. })
    }

    /// Whether forcing the refused action would apply it ([`StoreError::NeedsForce`]).
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
            | Self::NeedsStorageKeys(_)
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
    pub(crate) fn refine<DB: Backend>(self) -> Self {
        match self {
            Self::Database(error) if DB::classify(&error) == Failure::LockTimeout => {
                Self::LockTimeout(error)
            }
            other => other,
        }
    }
}

/// [`StoreError::Database`]; the store then tells lock timeouts apart.
impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

/// Why an operator action does not apply to a row in its current state
/// ([`StoreError::NotApplicable`]): nothing was changed, and forcing it would change nothing
/// either. Times are milliseconds since the Unix epoch, for the caller to show as it shows
/// times; the `Display` text gives them as numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotApplicable {
    /// [`crate::Action::Release`], [`crate::Action::Complete`] or [`crate::Action::Fail`] of
    /// a key that is not processing or stuck (completed or expired): nothing runs to hand on
    /// or to end.
    NotRunning {
        /// The action ([`crate::Action::name`]).
        action: &'static str,
        /// The key's status.
        status: KeyStatus,
    },
    /// [`crate::Action::Expire`] of a key that is not final (processing or stuck): it never
    /// expires, whatever its TTL; failing or completing it ends it, releasing it lets it
    /// resume.
    NotFinal {
        /// The key's status.
        status: KeyStatus,
    },
    /// [`crate::Action::Expire`] of a key whose expiry has come already.
    ExpiredAlready {
        /// When it expired (`expires_at`).
        expired_at_ms: i64,
    },
    /// [`crate::Outbox::retry`] of an id no message has.
    NoMessage {
        /// The id asked for.
        id: i64,
    },
    /// [`crate::Outbox::retry`] of a delivered message.
    Delivered {
        /// The message's id.
        id: i64,
    },
    /// [`crate::Outbox::retry`] of a message a dispatcher holds: its outcome comes when the
    /// delivery ends.
    InFlight {
        /// The message's id.
        id: i64,
        /// When the dispatcher's lease ends (`locked_until`).
        locked_until_ms: i64,
    },
    /// [`crate::Outbox::retry`] of a pending message due already: the next claim takes it.
    Due {
        /// The message's id.
        id: i64,
        /// When it fell due (`next_attempt_at`).
        due_at_ms: i64,
    },
}

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotRunning { action, status } => write!(
                f,
                "{action}: the key is {status}; only processing or stuck keys can be \
                 released, completed or failed"
            ),
            Self::NotFinal { status } => write!(
                f,
                "expire: the key is {status}, and a key that is not final never expires (it \
                 is resumed, or answered 409 while its lease is live, whatever its TTL); fail \
                 or complete it to end it, release it to let it resume"
            ),
            Self::ExpiredAlready { expired_at_ms } => write!(
                f,
                "expire: the key expired already (at {expired_at_ms}, in ms since the Unix \
                 epoch)"
            ),
            Self::NoMessage { id } => write!(f, "retry: there is no outbox message with id {id}"),
            Self::Delivered { id } => write!(
                f,
                "retry: outbox message {id} was delivered; only dead messages and pending \
                 ones waiting for their next attempt are retried"
            ),
            Self::InFlight { id, .. } => write!(
                f,
                "retry: outbox message {id} is being delivered (a dispatcher holds it until \
                 its lease ends); wait for the outcome"
            ),
            Self::Due { id, .. } => write!(
                f,
                "retry: outbox message {id} is due already: the next claim takes it"
            ),
        }
    }
}

/// Why an action that applies to a key could do harm now: [`crate::KeyTable::act`] refuses it
/// ([`StoreError::NeedsForce`]) unless the actor forces it ([`crate::Actor::force`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hazard {
    /// The key is processing and its lease is live: an attempt is running, and its work (a
    /// call to a provider, say) goes on whatever is done to the key's row, so acting under it
    /// can leave that work's effect with no record. Stuck keys are not refused. Forced, the
    /// action fences the running attempt out ([`crate::Action`]).
    LeaseLive {
        /// The lease's end (`locked_until`); `None` for a processing row without a lease
        /// (written by hand), which counts as held.
        locked_until_ms: Option<i64>,
    },
    /// [`crate::Action::Delete`] of a completed staged key (`attempt` above 0, or a recovery
    /// point): its steps' effects exist, and a new execution of the key would run them again
    /// (colliding with the rows they wrote, or calling a provider twice).
    EffectsExist {
        /// The key's `attempt`.
        attempt: i64,
        /// The key's last journaled step.
        recovery_point: Option<String>,
    },
}

impl Hazard {
    /// What forcing an action over this refusal risks, in an operator's words: what the
    /// operator tool says before a forced action.
    #[must_use]
    pub fn risk(&self) -> String {
        match self {
            Self::LeaseLive { .. } => "an attempt is running: work it has under way (a call to a \
                 provider, say) goes on, and can take effect with no record of it in the key (a \
                 charge that no payment names); forced, the attempt is fenced out and commits \
                 nothing more to this row. After a forced delete, a request with the same body \
                 reserves the key again under the same reservation id and provider keys, and an \
                 old attempt still running could then write to that new row: stop it first"
                .to_owned(),
            Self::EffectsExist { attempt, .. } => format!(
                "the key completed in staged mode (attempt {attempt}) and its steps' effects \
                 exist: a request under the key after the delete is a new reservation whose \
                 steps run again. With the same body they run under the same provider keys (a \
                 provider that deduplicates by key answers with the first effect; one that does \
                 not makes a second charge); with another body, under new provider keys: a \
                 second charge"
            ),
        }
    }
}

impl std::fmt::Display for Hazard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LeaseLive { locked_until_ms } => {
                match locked_until_ms {
                    Some(until) => write!(
                        f,
                        "the key's lease is live until {until} (ms since the Unix epoch)"
                    )?,
                    None => f.write_str("the key is processing with no lease end")?,
                }
                f.write_str(
                    ": an attempt is running, and its work goes on whatever is done to the key; \
                     wait until the lease runs out (the key is stuck then), or force the \
                     action, which fences the attempt out (it can commit nothing more)",
                )
            }
            Self::EffectsExist {
                attempt,
                recovery_point,
            } => {
                write!(f, "the key completed in staged mode (attempt {attempt}")?;
                if let Some(step) = recovery_point {
                    write!(f, ", recovery point {step:?}")?;
                }
                f.write_str(
                    "): its steps' effects exist, and a new execution of the key would run \
                     them again; retries replay its stored response as it is, a client that \
                     needs a new execution sends a new key, and expire ends the key as its TTL \
                     would",
                )
            }
        }
    }
}
