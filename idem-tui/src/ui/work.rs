//! What the UI asks the database for ([`Command`]) and what comes back to it ([`Msg`], with
//! the terminal's keys and the clock's ticks): the one interface between the UI's pure
//! state and the worker that runs the database work off the drawing path.

use idem_store::{
    Action, AuditEntry, Counts, InboxEvent, InboxStatus, Journal, KeyFilter, KeyRow, OperationInfo,
    OutboxCounts, OutboxRow, OutboxStatus, Page,
};
use ratatui::crossterm::event::KeyEvent;

use super::act::KeyId;
use super::note::{ActError, Failure};

/// Which messages the outbox view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxQuery {
    /// Only messages in this status.
    pub status: Option<OutboxStatus>,
    /// At most this many, oldest first.
    pub limit: u32,
}

/// A read of the message detail's message.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageData {
    /// The row; `None` when no message has the id.
    pub row: Option<OutboxRow>,
    /// Its audit history.
    pub audit: Result<Vec<AuditEntry>, Failure>,
}

/// Which events the inbox view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxQuery {
    /// Only events in this status.
    pub status: Option<InboxStatus>,
    /// At most this many, the longest noted first.
    pub limit: u32,
}

/// What a retry did.
#[derive(Debug, Clone, PartialEq)]
pub enum Retried {
    /// The message, as it is after.
    One(Box<OutboxRow>),
    /// How many messages were retried.
    All(u64),
}

/// A read of the detail pane's key.
#[derive(Debug, Clone, PartialEq)]
pub struct DetailData {
    /// The row; `None` when the key has no row.
    pub row: Option<KeyRow>,
    /// Its audit history.
    pub audit: Result<Vec<AuditEntry>, Failure>,
    /// Its journal.
    pub journal: Result<Option<Journal>, Failure>,
}

/// What a refresh read.
#[derive(Debug, Clone, PartialEq)]
pub struct Refreshed {
    /// The counts, when the refresh counted.
    pub counts: Option<Counts>,
    /// The operations, when the refresh counted.
    pub operations: Option<Vec<OperationInfo>>,
    /// The first keys of the listing.
    pub page: Page,
    /// The detail's key, when one was open.
    pub detail: Option<(KeyId, Result<DetailData, Failure>)>,
    /// The outbox's counts, when the refresh counted and could read them.
    pub outbox_counts: Option<OutboxCounts>,
    /// The outbox view's listing, when it was asked for: for which query, and what it read.
    pub outbox: Option<(OutboxQuery, Result<Vec<OutboxRow>, Failure>)>,
    /// The message detail's message, when one was open.
    pub message: Option<(i64, Result<MessageData, Failure>)>,
    /// The inbox view's listing, when it was asked for: for which query, and what it read.
    pub inbox: Option<(InboxQuery, Result<Vec<InboxEvent>, Failure>)>,
    /// The event detail's events (every source's with its event id), when one was open.
    pub event: Option<(String, Result<Vec<InboxEvent>, Failure>)>,
}

/// Everything that happens to the UI.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// A key was pressed.
    Key(KeyEvent),
    /// The clock moved on.
    Tick {
        /// Milliseconds since the Unix epoch.
        now_ms: i64,
    },
    /// A refresh finished.
    Refreshed {
        /// The listing it was for.
        generation: u64,
        /// What it read.
        result: Result<Box<Refreshed>, Failure>,
    },
    /// A next page arrived.
    MoreLoaded {
        /// The listing it was for.
        generation: u64,
        /// The page.
        result: Result<Page, Failure>,
    },
    /// The detail's key was read.
    DetailLoaded {
        /// Which key.
        key: KeyId,
        /// What was read.
        result: Result<Box<DetailData>, Failure>,
    },
    /// An action finished.
    Acted {
        /// The key.
        key: KeyId,
        /// The action's name.
        action: &'static str,
        /// The audit id, or why not.
        result: Result<i64, ActError>,
    },
    /// A message of the detail pane was read.
    MessageLoaded {
        /// Which message.
        id: i64,
        /// What was read.
        result: Result<Box<MessageData>, Failure>,
    },
    /// A retry finished.
    Retried {
        /// The message retried; `None`: every one that applied.
        id: Option<i64>,
        /// What it did, or why not.
        result: Result<Retried, ActError>,
    },
}

/// Database work for the loop to run off the drawing path; its result comes back as a
/// [`Msg`].
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Read the listing's first `filter.limit` keys, the detail's key and, with `count`,
    /// the counts and the operations; answered by [`Msg::Refreshed`].
    Refresh {
        /// The listing.
        generation: u64,
        /// Also count the keys (one pass over the table).
        count: bool,
        /// Its filter.
        filter: KeyFilter,
        /// The detail's key.
        detail: Option<KeyId>,
        /// The outbox view's listing, when the view is shown.
        outbox: Option<OutboxQuery>,
        /// The message detail's message.
        message: Option<i64>,
        /// The inbox view's listing, when the view is shown.
        inbox: Option<InboxQuery>,
        /// The event detail's event id.
        event: Option<String>,
    },
    /// Read the next page; answered by [`Msg::MoreLoaded`].
    LoadMore {
        /// The listing.
        generation: u64,
        /// Its filter, `after` the last loaded key.
        filter: KeyFilter,
    },
    /// Read one key, its audit and journal; answered by [`Msg::DetailLoaded`].
    LoadDetail {
        /// The key.
        key: KeyId,
    },
    /// Act on a key; answered by [`Msg::Acted`].
    Act {
        /// The key.
        key: KeyId,
        /// The row that was shown.
        expected: Box<KeyRow>,
        /// What to do.
        action: Action,
        /// Why.
        reason: String,
    },
    /// Read one message and its audit history; answered by [`Msg::MessageLoaded`].
    LoadMessage {
        /// The message's row id.
        id: i64,
    },
    /// Retry a message, or every message a retry applies to; answered by [`Msg::Retried`].
    Retry {
        /// The message's row id; `None`: all of them.
        id: Option<i64>,
        /// Why.
        reason: String,
    },
}
