//! Why a command failed, and the exit code that says so.

use idem_store::{Hazard, StoreError};
use serde_json::Value;

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
            StoreError::NotApplicable(why) => Self::new(Self::REFUSED, not_applicable(&why)),
            StoreError::NeedsForce { action, hazard } => {
                Self::new(Self::REFUSED, needs_force(action, &hazard))
            }
            StoreError::InvalidArgument(_)
            | StoreError::InvalidCursor
            | StoreError::InvalidStatus(_) => Self::usage(store_message(&error)),
            StoreError::NeedsStorageKeys(_) => Self::usage(format!(
                "{}; the storage keys are given with --storage-keys or IDEM_STORAGE_KEYS",
                store_message(&error)
            )),
            other => Self::error(store_message(&other)),
        }
    }
}

/// A store error in the tool's words: its message, with the times it gives as milliseconds
/// since the Unix epoch written as times ([`crate::format::epochs_as_times`]). The command
/// line and the terminal UI show every store error through this, [`not_applicable`] or
/// [`needs_force`].
pub fn store_message(error: &StoreError) -> String {
    crate::format::epochs_as_times(&error.to_string())
}

/// Why an action does not apply ([`StoreError::NotApplicable`]): the store's words, its
/// times as times (`expire: the key expired already (at 2026-12-04T20:19:25.427Z)`).
pub fn not_applicable(why: &str) -> String {
    format!(
        "refused: not applicable: {}",
        crate::format::epochs_as_times(why)
    )
}

/// The command line's words for an action the store refuses unless forced: why, and that
/// `--force` overrides it.
pub fn needs_force(action: &str, hazard: &Hazard) -> String {
    match hazard {
        Hazard::LeaseLive { locked_until_ms } => {
            let until = locked_until_ms.map_or_else(
                || "with no end (a processing row without a lease)".to_owned(),
                |ms| format!("until {}", crate::format::rfc3339(ms)),
            );
            format!(
                "refused: {action}: the key's lease is live {until}: an attempt is running, and \
                 its work goes on whatever is done to the key; wait until the lease runs out \
                 (the key is stuck then), or pass --force to {action} it now, fencing the \
                 attempt out (it can commit nothing more; recorded as forced in the audit trail)"
            )
        }
        other => format!(
            "refused: {action}: {}; --force overrides this (recorded as forced in the audit \
             trail)",
            crate::format::epochs_as_times(&other.to_string())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_exit_codes() {
        let changed = CommandError::from(StoreError::Changed { current: None });
        assert_eq!(changed.code, CommandError::REFUSED);
        assert_eq!(changed.current, Some(Value::Null));
        let not_applicable = CommandError::from(StoreError::NotApplicable("expired".into()));
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
        // idem-store's words when the key's TTL ran out between reading and acting.
        let expired = CommandError::from(StoreError::NotApplicable(
            "expire: the key expired already (at 1796415565427 ms)".into(),
        ));
        assert_eq!(expired.code, CommandError::REFUSED);
        assert_eq!(
            expired.message,
            "refused: not applicable: expire: the key expired already (at \
             2026-12-04T20:19:25.427Z)"
        );
        // Any other store error, as shown: its epochs as times too.
        let corrupt = StoreError::Corrupt(
            "a row locked until 1800000000000 (ms since the Unix epoch)".into(),
        );
        assert_eq!(
            store_message(&corrupt),
            "unreadable row: a row locked until 2027-01-15T08:00:00.000Z"
        );
    }
}
