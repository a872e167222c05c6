//! What an operator acts on, and how: a key's identity ([`KeyId`]) and the actions
//! ([`ActKind`]), the words the views, the dialog, the status line and the worker share.

use idem_store::{Action, KeyRef, KeyRow, KeyStatus, StoredResponse};

use super::keymap::Do;

/// A key's identity, owned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    /// The scope.
    pub scope: String,
    /// The operation id.
    pub operation: String,
    /// The client's key.
    pub key: String,
}

impl KeyId {
    /// The identity of `row`.
    #[must_use]
    pub fn of(row: &KeyRow) -> Self {
        Self {
            scope: row.scope.clone(),
            operation: row.operation.clone(),
            key: row.key.clone(),
        }
    }

    /// Borrowed, for the store.
    #[must_use]
    pub fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.scope, self.operation, self.key)
    }
}

/// What an operator can do to a key, or to the outbox's messages (the [`keymap`] binds
/// each to a key).
///
/// [`keymap`]: super::keymap
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    /// Expire the key.
    Expire,
    /// Release the key.
    Release,
    /// Complete the key with a response.
    Complete,
    /// Fail the key with a response.
    Fail,
    /// Delete the key.
    Delete,
    /// Retry one message.
    Retry,
    /// Retry every message a retry applies to.
    RetryAll,
}

impl ActKind {
    /// The action on keys a key press asks for; `None` for anything else.
    #[must_use]
    pub fn on_keys(what: Do) -> Option<Self> {
        match what {
            Do::Expire => Some(Self::Expire),
            Do::Release => Some(Self::Release),
            Do::Complete => Some(Self::Complete),
            Do::Fail => Some(Self::Fail),
            Do::Delete => Some(Self::Delete),
            _ => None,
        }
    }

    /// The verb, as in the audit trail.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Expire => "expire",
            Self::Release => "release",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Delete => "delete",
            Self::Retry => "retry",
            Self::RetryAll => "retry all",
        }
    }

    /// Whether the action applies to a key in `status` (as the store decides it); the
    /// outbox's retries apply to no key.
    #[must_use]
    pub fn applies_to(self, status: KeyStatus) -> bool {
        match self {
            Self::Expire => status != KeyStatus::Expired,
            Self::Release | Self::Complete | Self::Fail => {
                matches!(status, KeyStatus::Processing | KeyStatus::Stuck)
            }
            Self::Delete => true,
            Self::Retry | Self::RetryAll => false,
        }
    }

    /// Whether the dialog asks for a response (status and body).
    #[must_use]
    pub fn needs_response(self) -> bool {
        matches!(self, Self::Complete | Self::Fail)
    }

    /// The store's action of this kind, whatever its response (for what the store decides
    /// by its kind alone: [`Action::hazard`]); `None` for the retries.
    #[must_use]
    pub fn store_action(self) -> Option<Action> {
        match self {
            Self::Expire => Some(Action::Expire),
            Self::Release => Some(Action::Release),
            Self::Complete => Some(Action::Complete(StoredResponse::default())),
            Self::Fail => Some(Action::Fail(StoredResponse::default())),
            Self::Delete => Some(Action::Delete),
            Self::Retry | Self::RetryAll => None,
        }
    }
}
