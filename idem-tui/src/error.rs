//! Why a command failed, and the exit code that says so.

use idem_store::StoreError;
use serde_json::Value;

use crate::refusal::{Forcing, store_message};

/// A command's failure: the exit code, one line for the operator, and, for a refused
/// action on a key that changed, the key as it is now.
#[derive(Debug)]
pub struct CommandError {
    /// The process's exit code ([`CommandError::ERROR`], [`CommandError::USAGE`], …).
    pub code: i32,
    /// What went wrong, in one line.
    pub message: String,
    /// The key as it is now (`null` once deleted), when an action was refused because it
    /// changed.
    pub current: Option<Value>,
}

impl CommandError {
    /// Anything else: the database failed, a file could not be read, a row is unreadable.
    pub const ERROR: i32 = 1;
    /// The command line is wrong (also clap's own code).
    pub const USAGE: i32 = 2;
    /// The key does not exist.
    pub const NOT_FOUND: i32 = 3;
    /// Refused: the key changed since it was read, the action does not apply to its state,
    /// it needs `--force` (a live lease, deleting a completed staged key), or the tool runs
    /// `--read-only`.
    pub const REFUSED: i32 = 4;

    /// A failure with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            current: None,
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Self::USAGE, message)
    }

    /// A plain error.
    pub fn error(message: impl Into<String>) -> Self {
        Self::new(Self::ERROR, message)
    }

    /// The key does not exist.
    pub fn not_found(key: &crate::cli::KeyArgs) -> Self {
        Self::new(
            Self::NOT_FOUND,
            format!(
                "no key {:?} in scope {:?} for operation {:?}",
                key.key, key.scope, key.operation
            ),
        )
    }

    /// `--read-only` refuses `what`.
    pub fn read_only(what: &str) -> Self {
        Self::new(
            Self::REFUSED,
            format!("refused: {what} changes the database and the tool runs --read-only"),
        )
    }
}

impl From<StoreError> for CommandError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Changed { current } => Self {
                code: Self::REFUSED,
                message: match &current {
                    Some(_) => {
                        "refused: the key changed since it was read; look at it again".to_owned()
                    }
                    None => "refused: the key was deleted since it was read".to_owned(),
                },
                current: Some(current.map_or(Value::Null, |row| {
                    crate::format::row_json(&row, crate::format::now_ms())
                })),
            },
            StoreError::NotApplicable(_) | StoreError::NeedsForce { .. } => {
                Self::new(Self::REFUSED, store_message(&error, Forcing::Flag))
            }
            StoreError::InvalidArgument(_)
            | StoreError::InvalidCursor
            | StoreError::InvalidStatus(_) => Self::usage(error.to_string()),
            StoreError::NeedsStorageKeys(_) => Self::usage(format!(
                "{error}; the storage keys are given with --storage-keys or IDEM_STORAGE_KEYS"
            )),
            other => Self::error(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use idem_store::{Hazard, NotApplicable};

    use super::*;

    #[test]
    fn store_errors_map_to_exit_codes() {
        let changed = CommandError::from(StoreError::Changed { current: None });
        assert_eq!(changed.code, CommandError::REFUSED);
        assert_eq!(changed.current, Some(Value::Null));
        let not_applicable =
            CommandError::from(StoreError::NotApplicable(NotApplicable::ExpiredAlready {
                expired_at_ms: 0,
            }));
        assert_eq!(not_applicable.code, CommandError::REFUSED);
        assert!(not_applicable.message.contains("expired"));
        let live = CommandError::from(StoreError::NeedsForce {
            action: "complete",
            hazard: Hazard::LeaseLive {
                locked_until_ms: Some(1_800_000_000_000),
            },
        });
        assert_eq!(live.code, CommandError::REFUSED);
        assert!(
            live.message.contains("live until 2027-01-15T08:00:00.000Z"),
            "{}",
            live.message
        );
        assert!(live.message.contains("--force"), "{}", live.message);
        assert!(!live.message.contains(" ms"), "{}", live.message);
        assert_eq!(
            CommandError::from(StoreError::InvalidCursor).code,
            CommandError::USAGE
        );
        assert_eq!(
            CommandError::from(StoreError::Corrupt("x".into())).code,
            CommandError::ERROR
        );
        let keys = CommandError::from(StoreError::NeedsStorageKeys("sealed (k1)".into()));
        assert_eq!(keys.code, CommandError::USAGE);
        assert!(
            keys.message
                .ends_with("given with --storage-keys or IDEM_STORAGE_KEYS")
        );
    }

    #[test]
    fn refusals_show_times_not_epochs() {
        // The key's TTL ran out between reading and acting.
        let expired =
            CommandError::from(StoreError::NotApplicable(NotApplicable::ExpiredAlready {
                expired_at_ms: 1_796_415_565_427,
            }));
        assert_eq!(expired.code, CommandError::REFUSED);
        assert_eq!(
            expired.message,
            "refused: not applicable: expire: the key expired already (at \
             2026-12-04T20:19:25.427Z)"
        );
    }
}
