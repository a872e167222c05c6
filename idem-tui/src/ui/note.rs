//! What the status line says: every message of the terminal UI (a confirmation, a refusal,
//! a failure) as a typed [`Note`], and [`Note::text`], the one place that words them.

use std::fmt;
use std::sync::Arc;

use idem_store::{Hazard, InboxStatus, KeyRow, KeyStatus, NotApplicable, OutboxStatus, StoreError};

use super::act::{ActKind, KeyId};
use crate::refusal::{self, Forcing};

/// Why the database did not answer: the store's error, or the task that ran the work died.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The store's error.
    Store(Arc<StoreError>),
    /// The task running the database work failed (it panicked or was cancelled).
    Task(Arc<tokio::task::JoinError>),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Self::Store(Arc::new(error))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(error) => f.write_str(&refusal::store_message(error, Forcing::CommandLine)),
            Self::Task(error) => write!(f, "the database task failed: {error}"),
        }
    }
}

/// Two failures are the same when they say the same (errors have no equality of their own).
impl PartialEq for Failure {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Why the store refused an action on the state it found.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The action does not apply to the state.
    NotApplicable(NotApplicable),
    /// The action could do harm, and only a forced action (the command line's `--force`)
    /// would do it.
    NeedsForce {
        /// The action.
        action: &'static str,
        /// Why.
        hazard: Hazard,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&match self {
            Self::NotApplicable(why) => refusal::not_applicable(why),
            Self::NeedsForce { action, hazard } => {
                refusal::needs_force(action, hazard, Forcing::CommandLine)
            }
        })
    }
}

/// Why an action (on a key, or a retry) was not done.
#[derive(Debug, Clone, PartialEq)]
pub enum ActError {
    /// The row changed since it was shown; this is the row now (`None`: deleted).
    Changed(Option<Box<KeyRow>>),
    /// The store refused the action on the state it found.
    Refused(Refusal),
    /// Anything else.
    Failed(Failure),
}

impl From<StoreError> for ActError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Changed { current } => Self::Changed(current),
            StoreError::NotApplicable(why) => Self::Refused(Refusal::NotApplicable(why)),
            StoreError::NeedsForce { action, hazard } => {
                Self::Refused(Refusal::NeedsForce { action, hazard })
            }
            other => Self::Failed(other.into()),
        }
    }
}

/// What a filter was set to (`None`: every row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterSet {
    /// The key table's status filter.
    Keys(Option<KeyStatus>),
    /// The outbox view's status filter.
    Outbox(Option<OutboxStatus>),
    /// The inbox view's status filter.
    Inbox(Option<InboxStatus>),
}

/// Which filters were cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// The key table's.
    Keys,
    /// The outbox view's.
    Outbox,
    /// The inbox view's.
    Inbox,
}

/// What was read, when a read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// A refresh of what is shown.
    Refresh,
    /// The next page of keys.
    MoreKeys,
    /// A key's detail.
    Key(KeyId),
    /// An outbox message's detail.
    Message(i64),
    /// The events of an inbox event id.
    Event(String),
}

/// What a retry was of: one message, or every one a retry applies to.
pub type RetryOf = Option<i64>;

/// A message of the status line.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Live refresh paused (`true`) or resumed.
    Paused(bool),
    /// A filter set.
    Filter(FilterSet),
    /// Filters cleared.
    Cleared(Cleared),
    /// A dialog closed without acting.
    Cancelled,
    /// An action on a key is under way.
    Acting {
        /// Its name.
        action: &'static str,
        /// The key.
        key: KeyId,
    },
    /// An action on a key was done.
    Acted {
        /// Its name.
        action: &'static str,
        /// The key.
        key: KeyId,
        /// Its audit entry.
        audit_id: i64,
    },
    /// A retry is under way.
    Retrying(RetryOf),
    /// A message was retried: its id and dedup id.
    RetriedOne {
        /// Its id.
        id: i64,
        /// Its dedup id.
        dedup_id: String,
    },
    /// Every message a retry applied to was retried: how many.
    RetriedAll(u64),
    /// An action on a key was not done.
    NotActed {
        /// Its name.
        action: &'static str,
        /// The key.
        key: KeyId,
        /// Why.
        error: ActError,
    },
    /// A retry was not done.
    NotRetried {
        /// Of what.
        of: RetryOf,
        /// Why.
        error: ActError,
    },
    /// The tool runs `--read-only`: the action is refused.
    ReadOnly(ActKind),
    /// An action with nothing selected to act on.
    NothingSelected(ActKind),
    /// A key action that does not apply to the selected key's status.
    DoesNotApply {
        /// The action.
        kind: ActKind,
        /// The key's status.
        status: KeyStatus,
        /// The key.
        key: KeyId,
    },
    /// A retry of a message it does not apply to.
    NotRetryable {
        /// Its id.
        id: i64,
        /// Its dedup id.
        dedup_id: String,
        /// How it stands ([`crate::message::state`]).
        state: &'static str,
    },
    /// A key action's key (`c`) pressed where no key is shown; `inbox` when on the inbox.
    KeysOnly {
        /// The key pressed.
        pressed: char,
        /// Whether on the inbox (else the outbox).
        inbox: bool,
    },
    /// A read failed.
    ReadFailed(Read, Failure),
    /// The terminal failed to deliver an event.
    Terminal(String),
}

impl Note {
    /// Whether it reports a failure or a refusal (shown in red).
    #[must_use]
    pub fn is_error(&self) -> bool {
        !matches!(
            self,
            Self::Paused(_)
                | Self::Filter(_)
                | Self::Cleared(_)
                | Self::Cancelled
                | Self::Acting { .. }
                | Self::Acted { .. }
                | Self::Retrying(_)
                | Self::RetriedOne { .. }
                | Self::RetriedAll(_)
        )
    }

    /// The words shown.
    #[must_use]
    pub fn text(&self) -> String {
        match self {
            Self::Paused(true) => "live refresh paused (p resumes)".to_owned(),
            Self::Paused(false) => "live refresh resumed".to_owned(),
            Self::Filter(set) => filter_text(*set),
            Self::Cleared(Cleared::Keys) => "filters cleared".to_owned(),
            Self::Cleared(Cleared::Outbox) => "outbox filter cleared".to_owned(),
            Self::Cleared(Cleared::Inbox) => "inbox filter cleared".to_owned(),
            Self::Cancelled => "cancelled: nothing was changed".to_owned(),
            Self::Acting { action, key } => format!("{action}: {key}…"),
            Self::Acted {
                action,
                key,
                audit_id,
            } => format!("{action}: {key} done (audit #{audit_id})"),
            Self::Retrying(Some(id)) => format!("retry: message #{id}…"),
            Self::Retrying(None) => "retry all: every dead or waiting message…".to_owned(),
            Self::RetriedOne { id, dedup_id } => {
                format!("retry: message #{id} ({dedup_id}) is pending again, due now (audited)")
            }
            Self::RetriedAll(0) => "retry all: nothing to retry (no dead message, none waiting \
                                    for its next attempt)"
                .to_owned(),
            Self::RetriedAll(n) => format!(
                "retry all: {n} {} pending again, due now (audited)",
                plural(*n, "message", "messages")
            ),
            Self::NotActed { action, key, error } => not_acted(action, key, error),
            Self::NotRetried { of, error } => not_retried(*of, error),
            Self::ReadOnly(kind) => format!(
                "read-only: {} refused (the tool was started with --read-only)",
                kind.name()
            ),
            Self::NothingSelected(ActKind::Retry) => "retry: no message selected".to_owned(),
            Self::NothingSelected(kind) => format!("{}: no key selected", kind.name()),
            Self::DoesNotApply { kind, status, key } => {
                format!("{} does not apply to a {status} key ({key})", kind.name())
            }
            Self::NotRetryable {
                id,
                dedup_id,
                state,
            } => format!(
                "retry does not apply to message #{id} ({dedup_id}): it is {state}; only dead \
                 messages and pending ones waiting for their next attempt are retried"
            ),
            Self::KeysOnly { pressed, inbox } => keys_only(*pressed, *inbox),
            Self::ReadFailed(read, failure) => read_failed(read, failure),
            Self::Terminal(why) => format!("terminal: {why}"),
        }
    }
}

/// `one` for 1, `many` for any other count: `1 key`, `2 keys`, `0 keys`.
#[must_use]
pub fn plural(n: impl Into<u64>, one: &'static str, many: &'static str) -> &'static str {
    if n.into() == 1 { one } else { many }
}

fn filter_text(set: FilterSet) -> String {
    match set {
        FilterSet::Keys(status) => {
            format!("status filter: {}", status.map_or("all", KeyStatus::as_str))
        }
        FilterSet::Outbox(status) => format!(
            "outbox status filter: {}",
            status.map_or("all", OutboxStatus::as_str)
        ),
        FilterSet::Inbox(status) => format!(
            "inbox status filter: {}",
            status.map_or("all", InboxStatus::as_str)
        ),
    }
}

fn not_acted(action: &str, key: &KeyId, error: &ActError) -> String {
    match error {
        ActError::Changed(current) => {
            let now = match current {
                Some(row) => format!("it is {} now, attempt {}", row.status, row.attempt),
                None => "it is gone now".to_owned(),
            };
            format!(
                "{action} refused: {key} changed since it was shown ({now}); nothing was \
                 changed: look at it again"
            )
        }
        ActError::Refused(why) => format!("{key}: {why}"),
        ActError::Failed(e) => format!("{action} failed: {key}: {e}"),
    }
}

fn not_retried(of: RetryOf, error: &ActError) -> String {
    let what = of.map_or_else(
        || "every dead or waiting message".to_owned(),
        |id| format!("message #{id}"),
    );
    match error {
        ActError::Refused(why) => format!("{what}: {why}"),
        ActError::Changed(_) => {
            format!("{what}: refused: it changed since it was shown; look at it again")
        }
        ActError::Failed(e) => format!("retry failed: {what}: {e}"),
    }
}

fn keys_only(pressed: char, inbox: bool) -> String {
    if inbox {
        format!(
            "{pressed} acts on keys (Tab to the keys view); the inbox is read-only: settle an \
             unmatched event where it came from, or by hand"
        )
    } else {
        format!(
            "{pressed} acts on keys (Tab to the keys view); in the outbox, r retries the \
             selected message and A every dead or waiting one"
        )
    }
}

fn read_failed(read: &Read, failure: &Failure) -> String {
    match read {
        Read::Refresh => format!("refresh failed: {failure}"),
        Read::MoreKeys => format!("loading more keys failed: {failure}"),
        Read::Key(key) => format!("reading {key} failed: {failure}"),
        Read::Message(id) => format!("reading message #{id} failed: {failure}"),
        Read::Event(event_id) => format!("reading inbox event {event_id:?} failed: {failure}"),
    }
}
