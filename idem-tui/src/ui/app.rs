//! The UI's state ([`App`]), what happens to it ([`Msg`]), and what it asks the database for
//! ([`Command`]): [`update`] is pure, so every transition is a unit test.

use idem_store::{
    Action, AuditEntry, Counts, Cursor, InboxEvent, InboxStatus, Journal, KeyFilter, KeyRef,
    KeyRow, KeyStatus, OperationInfo, OutboxCounts, OutboxRow, OutboxStatus, Page, StoredResponse,
};
use jiff::tz::TimeZone;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind};
use ratatui::text::Line;

use super::detail;
use super::format::{Expiry, message_state};
use super::keymap::{self, Do, Screen, Step};
pub use super::note::{ActError, Failure};
use super::note::{Cleared, FilterSet, Note, Read};

/// How often the keys and an open detail are read again, unless paused.
pub const REFRESH_EVERY_MS: i64 = 2_000;
/// How often the counts (and the operations view) are read again: they are one pass over
/// the whole key table, so less often than the keys, and never for the first screen.
pub const COUNT_EVERY_MS: i64 = 10_000;
/// Keys per page of the listing (and entries of a key's audit trail shown).
pub const PAGE: u32 = idem_store::KeyFilter::DEFAULT_LIMIT;
/// The next page is loaded when the selection comes this close to the last loaded key.
pub const PREFETCH: usize = 5;
/// The most messages the outbox view reads (the store lists them oldest first, without
/// pages).
pub const MESSAGES: u32 = 500;
/// The most events the inbox view reads (the store lists them the longest noted first,
/// without pages).
pub const EVENTS: u32 = 500;

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

/// The operations of `counts.by_operation`, without registrations: the operations view
/// when the registry cannot be read.
#[must_use]
pub fn operations_from_counts(counts: &Counts) -> Vec<OperationInfo> {
    counts
        .by_operation
        .iter()
        .map(|(operation, counts)| OperationInfo {
            operation: operation.clone(),
            counts: *counts,
            registered: None,
        })
        .collect()
}

/// The top-level views, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The key table.
    Keys,
    /// Operations and their counts.
    Operations,
    /// The outbox's messages.
    Outbox,
    /// The inbox's events.
    Inbox,
}

impl View {
    /// The view after this one (`Tab`); after the last, the first.
    #[must_use]
    pub fn next(self) -> Self {
        match self {
            Self::Keys => Self::Operations,
            Self::Operations => Self::Outbox,
            Self::Outbox => Self::Inbox,
            Self::Inbox => Self::Keys,
        }
    }

    /// The view before this one (`BackTab`); before the first, the last.
    #[must_use]
    pub fn previous(self) -> Self {
        match self {
            Self::Keys => Self::Inbox,
            Self::Operations => Self::Keys,
            Self::Outbox => Self::Operations,
            Self::Inbox => Self::Outbox,
        }
    }
}

/// A column of the key table, for sorting the loaded rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// Scope.
    Scope,
    /// Operation.
    Operation,
    /// Key.
    Key,
    /// Status.
    Status,
    /// Age (since created).
    Age,
    /// Expires in.
    Expires,
    /// Response status.
    Response,
}

impl Column {
    /// Columns in screen order, bound to `1`…`7`.
    pub const ALL: [Self; 7] = [
        Self::Scope,
        Self::Operation,
        Self::Key,
        Self::Status,
        Self::Age,
        Self::Expires,
        Self::Response,
    ];

    /// The column's title.
    #[must_use]
    pub fn title(self) -> &'static str {
        match self {
            Self::Scope => "scope",
            Self::Operation => "operation",
            Self::Key => "key",
            Self::Status => "status",
            Self::Age => "age",
            Self::Expires => "exp in",
            Self::Response => "resp",
        }
    }
}

/// The filters of the listing, applied by the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this status.
    pub status: Option<KeyStatus>,
    /// Only this scope.
    pub scope: Option<String>,
    /// Only this operation.
    pub operation: Option<String>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
}

impl Filters {
    /// The store's filter for a page of `limit` keys after `after`.
    #[must_use]
    pub fn to_key_filter(&self, limit: u32, after: Option<Cursor>) -> KeyFilter {
        let mut filter = KeyFilter::new().limit(limit).after(after);
        filter.status = self.status;
        filter.scope.clone_from(&self.scope);
        filter.operation.clone_from(&self.operation);
        filter.key_prefix.clone_from(&self.key_prefix);
        filter
    }
}

/// What an operator can do to a key, or to the outbox's messages (the [`keymap`] binds
/// each to a key).
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
}

/// A field of the action dialog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Why (required).
    Reason,
    /// The response status (complete and fail).
    Status,
    /// The response body (complete and fail).
    Body,
    /// The buttons: `y` confirms, `n` cancels.
    Confirm,
}

/// What an action's dialog acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A key, its row as it was shown when the dialog opened: the store refuses the action
    /// if the row is not this one any more.
    Key(KeyRow),
    /// An outbox message, as it was shown: the store decides on the message as it is when
    /// the retry runs (refused if it was claimed, delivered or became due meanwhile).
    Message(OutboxRow),
    /// Every message a retry applies to when it runs.
    AllMessages,
}

/// The confirmation dialog of an action.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialog {
    /// The action.
    pub kind: ActKind,
    /// What it acts on.
    pub target: Target,
    /// The reason typed so far.
    pub reason: String,
    /// The response status typed so far.
    pub status: String,
    /// The response body typed so far.
    pub body: String,
    /// Where typing goes.
    pub focus: Field,
    /// Why the last `y` was not accepted.
    pub error: Option<DialogError>,
}

/// Why a dialog's `y` is not accepted as filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialogError {
    /// No reason given.
    NoReason,
    /// The response status is not a number.
    StatusNotANumber(String),
    /// The response status is out of range: at least this, at most 599.
    StatusOutOfRange(u16),
    /// A retry's dialog asked for a key action.
    NotAKeyAction,
}

impl std::fmt::Display for DialogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoReason => {
                f.write_str("a reason is required: it is recorded in the audit trail")
            }
            Self::StatusNotANumber(status) => write!(f, "status {status:?} is not a number"),
            Self::StatusOutOfRange(lowest) => write!(f, "status must be within {lowest}..=599"),
            Self::NotAKeyAction => f.write_str("a retry acts on the outbox, not on a key"),
        }
    }
}

impl Dialog {
    /// The fields in order.
    #[must_use]
    pub fn fields(&self) -> &'static [Field] {
        if self.kind.needs_response() {
            &[Field::Reason, Field::Status, Field::Body, Field::Confirm]
        } else {
            &[Field::Reason, Field::Confirm]
        }
    }

    fn step(&mut self, forward: bool) {
        let fields = self.fields();
        let at = fields.iter().position(|f| *f == self.focus).unwrap_or(0);
        let next = if forward {
            (at + 1).min(fields.len() - 1)
        } else {
            at.saturating_sub(1)
        };
        self.focus = fields[next];
    }

    fn field_mut(&mut self) -> Option<&mut String> {
        match self.focus {
            Field::Reason => Some(&mut self.reason),
            Field::Status => Some(&mut self.status),
            Field::Body => Some(&mut self.body),
            Field::Confirm => None,
        }
    }

    /// The reason, trimmed.
    ///
    /// # Errors
    /// A missing reason.
    pub fn reason(&self) -> Result<String, DialogError> {
        let reason = self.reason.trim();
        if reason.is_empty() {
            return Err(DialogError::NoReason);
        }
        Ok(reason.to_owned())
    }

    /// The key action the dialog describes, or why it cannot be done as filled in.
    ///
    /// # Errors
    /// A missing reason, a status that is not a number in 100..=599 (400..=599 to fail);
    /// a retry, which is no key action.
    pub fn action(&self) -> Result<Action, DialogError> {
        self.reason()?;
        let response = || -> Result<StoredResponse, DialogError> {
            let status: u16 = self
                .status
                .trim()
                .parse()
                .map_err(|_| DialogError::StatusNotANumber(self.status.trim().to_owned()))?;
            let lowest = if self.kind == ActKind::Fail { 400 } else { 100 };
            if !(lowest..=599).contains(&status) {
                return Err(DialogError::StatusOutOfRange(lowest));
            }
            let body = self.body.clone().into_bytes();
            let headers =
                if !body.is_empty() && serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
                    vec![("content-type".to_owned(), "application/json".to_owned())]
                } else if body.is_empty() {
                    Vec::new()
                } else {
                    vec![(
                        "content-type".to_owned(),
                        "text/plain; charset=utf-8".to_owned(),
                    )]
                };
            Ok(StoredResponse {
                status,
                headers,
                body: body.into(),
            })
        };
        Ok(match self.kind {
            ActKind::Expire => Action::Expire,
            ActKind::Release => Action::Release,
            ActKind::Delete => Action::Delete,
            ActKind::Complete => Action::Complete(response()?),
            ActKind::Fail => Action::Fail(response()?),
            ActKind::Retry | ActKind::RetryAll => {
                return Err(DialogError::NotAKeyAction);
            }
        })
    }
}

/// The detail pane of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    /// Which key.
    pub key: KeyId,
    /// Its row as last read; `None` once it is gone.
    pub row: Option<KeyRow>,
    /// Its audit history, newest first (`Err`: why it could not be read).
    pub audit: Option<Result<Vec<AuditEntry>, Failure>>,
    /// Its journal (staged keys).
    pub journal: Option<Result<Option<Journal>, Failure>>,
    /// Lines scrolled down.
    pub scroll: u16,
    /// A read is under way.
    pub loading: bool,
}

impl Detail {
    /// The pane's lines ([`detail::lines`]), times shown in `tz` and relative to `now_ms`.
    #[must_use]
    pub fn lines(&self, now_ms: i64, tz: &TimeZone) -> Vec<Line<'static>> {
        detail::lines(
            self.row.as_ref(),
            self.journal.as_ref(),
            self.audit.as_ref(),
            now_ms,
            tz,
        )
    }
}

/// The detail pane of one outbox message.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageDetail {
    /// Which message: its row id.
    pub id: i64,
    /// Its row as last read; `None` once it is gone (swept).
    pub row: Option<OutboxRow>,
    /// Its audit history, newest first (`Err`: why it could not be read).
    pub audit: Option<Result<Vec<AuditEntry>, Failure>>,
    /// Lines scrolled down.
    pub scroll: u16,
    /// A read is under way.
    pub loading: bool,
}

impl MessageDetail {
    /// The pane's lines ([`detail::message_lines`]), times shown in `tz` and relative to
    /// `now_ms`.
    #[must_use]
    pub fn lines(&self, now_ms: i64, tz: &TimeZone) -> Vec<Line<'static>> {
        detail::message_lines(self.row.as_ref(), self.audit.as_ref(), now_ms, tz)
    }
}

/// The outbox view's listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Messages {
    /// The messages as last read, oldest first (at most [`MESSAGES`]).
    pub rows: Vec<OutboxRow>,
    /// The selected line.
    pub selected: usize,
    /// Only messages in this status.
    pub status: Option<OutboxStatus>,
    /// Whether a listing with this filter arrived.
    pub loaded: bool,
    /// Why the last listing failed.
    pub error: Option<Failure>,
}

impl Messages {
    /// The selected message.
    #[must_use]
    pub fn selected_row(&self) -> Option<&OutboxRow> {
        self.rows.get(self.selected)
    }

    /// The listing to read: its filter and its size.
    #[must_use]
    pub fn query(&self) -> OutboxQuery {
        OutboxQuery {
            status: self.status,
            limit: MESSAGES,
        }
    }
}

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

/// The inbox view's listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Events {
    /// The events as last read, the longest noted first (at most [`EVENTS`]).
    pub rows: Vec<InboxEvent>,
    /// The selected line.
    pub selected: usize,
    /// Only events in this status.
    pub status: Option<InboxStatus>,
    /// Whether a listing with this filter arrived.
    pub loaded: bool,
    /// Why the last listing failed.
    pub error: Option<Failure>,
}

impl Events {
    /// The selected event.
    #[must_use]
    pub fn selected_row(&self) -> Option<&InboxEvent> {
        self.rows.get(self.selected)
    }

    /// The listing to read: its filter and its size.
    #[must_use]
    pub fn query(&self) -> InboxQuery {
        InboxQuery {
            status: self.status,
            limit: EVENTS,
        }
    }
}

/// Which events the inbox view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxQuery {
    /// Only events in this status.
    pub status: Option<InboxStatus>,
    /// At most this many, the longest noted first.
    pub limit: u32,
}

/// The detail pane of one inbox event. The inbox is read-only: no action applies to it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventDetail {
    /// Which event: its inbox row's id.
    pub id: i64,
    /// Its event id, as its sender gave it: what a refresh reads it by.
    pub event_id: String,
    /// The event as last read; `None` once it left the inbox (applied after all).
    pub row: Option<InboxEvent>,
    /// Lines scrolled down.
    pub scroll: u16,
}

impl EventDetail {
    /// The pane's lines ([`detail::event_lines`]), times shown in `tz` and relative to
    /// `now_ms`.
    #[must_use]
    pub fn lines(&self, now_ms: i64, tz: &TimeZone) -> Vec<Line<'static>> {
        detail::event_lines(self.row.as_ref(), now_ms, tz)
    }
}

/// What a retry did.
#[derive(Debug, Clone, PartialEq)]
pub enum Retried {
    /// The message, as it is after.
    One(Box<OutboxRow>),
    /// How many messages were retried.
    All(u64),
}

/// A one-line text prompt (the `/` search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// What is typed so far.
    pub text: String,
}

/// Everything the screen shows.
#[derive(Debug, Clone)]
pub struct App {
    /// The database, redacted.
    pub database: String,
    /// Who acts (recorded in the audit trail).
    pub operator: String,
    /// Every action is refused.
    pub read_only: bool,
    /// Where local times are shown.
    pub tz: TimeZone,
    /// The clock, as last ticked: milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// The view shown.
    pub view: View,
    /// The counts of the last refresh.
    pub counts: Option<Counts>,
    /// The operations of the last refresh.
    pub operations: Vec<OperationInfo>,
    /// The selected line of the operations view.
    pub op_selected: usize,
    /// The loaded keys, in database order (scope, operation, key).
    pub rows: Vec<KeyRow>,
    /// Indexes into `rows`, in the order shown.
    pub order: Vec<usize>,
    /// Where the next page starts; `None` once the last page is loaded.
    pub next: Option<Cursor>,
    /// A next page is being read.
    pub loading_more: bool,
    /// Bumped at every change of filters: results of older listings are dropped.
    pub generation: u64,
    /// The listing's filters.
    pub filters: Filters,
    /// The sort of the loaded rows: `None` is the database order.
    pub sort: Option<(Column, bool)>,
    /// The selected line (index into `order`).
    pub selected: usize,
    /// The `/` prompt, while open.
    pub prompt: Option<Prompt>,
    /// The action dialog, while open.
    pub dialog: Option<Dialog>,
    /// The detail pane, while open.
    pub detail: Option<Detail>,
    /// The outbox view's messages.
    pub outbox: Messages,
    /// The outbox's counts, read with the keys' counts.
    pub outbox_counts: Option<OutboxCounts>,
    /// The detail pane of a message, while open (from the outbox view).
    pub message: Option<MessageDetail>,
    /// The inbox view's events.
    pub inbox: Events,
    /// The detail pane of an inbox event, while open (from the inbox view).
    pub event: Option<EventDetail>,
    /// The help overlay is shown.
    pub help: bool,
    /// Live refresh is paused.
    pub paused: bool,
    /// When the last refresh arrived.
    pub refreshed_at_ms: Option<i64>,
    /// When the last refresh was asked for.
    pub refresh_asked_ms: Option<i64>,
    /// A refresh of the current generation is under way.
    pub refreshing: bool,
    /// When the counts shown were read; `None` before, and after an action (they are
    /// stale then).
    pub counted_at_ms: Option<i64>,
    /// An action is under way.
    pub acting: bool,
    /// The status bar.
    pub status: Option<Note>,
    /// Lines of the key table on screen, for PageUp/PageDown.
    pub page_height: usize,
    /// The user asked to quit.
    pub quit: bool,
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

impl App {
    /// A fresh UI, nothing loaded yet: the first [`Msg::Tick`] asks for a refresh.
    #[must_use]
    pub fn new(database: String, operator: String, read_only: bool, tz: TimeZone) -> Self {
        Self {
            database,
            operator,
            read_only,
            tz,
            now_ms: 0,
            view: View::Keys,
            counts: None,
            operations: Vec::new(),
            op_selected: 0,
            rows: Vec::new(),
            order: Vec::new(),
            next: None,
            loading_more: false,
            generation: 0,
            filters: Filters::default(),
            sort: None,
            selected: 0,
            prompt: None,
            dialog: None,
            detail: None,
            outbox: Messages::default(),
            outbox_counts: None,
            message: None,
            inbox: Events::default(),
            event: None,
            help: false,
            paused: false,
            refreshed_at_ms: None,
            refresh_asked_ms: None,
            refreshing: false,
            counted_at_ms: None,
            acting: false,
            status: None,
            page_height: 10,
            quit: false,
        }
    }

    /// The selected key's row in the key table.
    #[must_use]
    pub fn selected_row(&self) -> Option<&KeyRow> {
        self.order
            .get(self.selected)
            .and_then(|&i| self.rows.get(i))
    }

    /// The rows in the order shown.
    pub fn shown_rows(&self) -> impl Iterator<Item = &KeyRow> {
        self.order.iter().filter_map(|&i| self.rows.get(i))
    }

    fn say(&mut self, note: Note) {
        self.status = Some(note);
    }

    /// Whether the next refresh counts: not for the first screen (the keys come first), then
    /// every [`COUNT_EVERY_MS`] and after an action.
    fn count_due(&self) -> bool {
        self.refreshed_at_ms.is_some()
            && self
                .counted_at_ms
                .is_none_or(|at| self.now_ms - at >= COUNT_EVERY_MS)
    }

    /// A refresh of everything shown, now.
    fn refresh(&mut self) -> Command {
        self.refreshing = true;
        self.refresh_asked_ms = Some(self.now_ms);
        let loaded = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
        Command::Refresh {
            generation: self.generation,
            count: self.count_due(),
            filter: self
                .filters
                .to_key_filter(loaded.clamp(PAGE, KeyFilter::MAX_LIMIT), None),
            detail: self.detail.as_ref().map(|d| d.key.clone()),
            outbox: (self.view == View::Outbox || self.message.is_some())
                .then(|| self.outbox.query()),
            message: self.message.as_ref().map(|m| m.id),
            inbox: (self.view == View::Inbox || self.event.is_some()).then(|| self.inbox.query()),
            event: self.event.as_ref().map(|e| e.event_id.clone()),
        }
    }

    /// The filters changed: a new listing from its first page.
    fn relist(&mut self) -> Command {
        self.generation += 1;
        self.rows.clear();
        self.order.clear();
        self.next = None;
        self.loading_more = false;
        self.selected = 0;
        self.refresh()
    }

    /// Recomputes `order` after a load or a change of sort, keeping the selected key.
    fn resort(&mut self, keep: Option<KeyId>) {
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        if let Some((column, descending)) = self.sort {
            let rows = &self.rows;
            let now_ms = self.now_ms;
            let expires = |row: &KeyRow| Expiry::of(row, now_ms).at_ms().unwrap_or(i64::MAX);
            order.sort_by(|&a, &b| {
                let (a, b) = (&rows[a], &rows[b]);
                let ord = match column {
                    Column::Scope => a.scope.cmp(&b.scope),
                    Column::Operation => a.operation.cmp(&b.operation),
                    Column::Key => a.key.cmp(&b.key),
                    Column::Status => a.status.as_str().cmp(b.status.as_str()),
                    // Youngest first: the latest creation time is the smallest age.
                    Column::Age => b.created_at_ms.cmp(&a.created_at_ms),
                    // A key that is not final never expires: after every final one.
                    Column::Expires => expires(a).cmp(&expires(b)),
                    Column::Response => a
                        .response
                        .as_ref()
                        .map(|r| r.status)
                        .cmp(&b.response.as_ref().map(|r| r.status)),
                };
                if descending { ord.reverse() } else { ord }
            });
        }
        self.order = order;
        if let Some(keep) = keep
            && let Some(at) = self
                .order
                .iter()
                .position(|&i| self.rows.get(i).is_some_and(|r| KeyId::of(r) == keep))
        {
            self.selected = at;
        }
        self.selected = self.selected.min(self.order.len().saturating_sub(1));
    }

    /// The next page, when the selection is near the end of the loaded keys.
    fn maybe_load_more(&mut self) -> Option<Command> {
        if self.loading_more || self.refreshing {
            return None;
        }
        let next = self.next.clone()?;
        if self.selected + PREFETCH < self.order.len() {
            return None;
        }
        self.loading_more = true;
        Some(Command::LoadMore {
            generation: self.generation,
            filter: self.filters.to_key_filter(PAGE, Some(next)),
        })
    }

    fn move_selection(&mut self, delta: isize) -> Option<Command> {
        match self.view {
            View::Keys => {
                let last = self.order.len().saturating_sub(1);
                self.selected = self.selected.saturating_add_signed(delta).min(last);
                self.maybe_load_more()
            }
            View::Operations => {
                let last = self.operations.len().saturating_sub(1);
                self.op_selected = self.op_selected.saturating_add_signed(delta).min(last);
                None
            }
            View::Outbox => {
                let last = self.outbox.rows.len().saturating_sub(1);
                self.outbox.selected = self.outbox.selected.saturating_add_signed(delta).min(last);
                None
            }
            View::Inbox => {
                let last = self.inbox.rows.len().saturating_sub(1);
                self.inbox.selected = self.inbox.selected.saturating_add_signed(delta).min(last);
                None
            }
        }
    }

    /// The row an action would apply to: the detail's, or the selected one.
    fn target(&self) -> Option<&KeyRow> {
        match &self.detail {
            Some(detail) => detail.row.as_ref(),
            None if self.view == View::Keys => self.selected_row(),
            None => None,
        }
    }

    fn open_dialog(&mut self, kind: ActKind) {
        if self.read_only {
            self.say(Note::ReadOnly(kind));
            return;
        }
        let Some(row) = self.target().cloned() else {
            self.say(Note::NothingSelected(kind));
            return;
        };
        if !kind.applies_to(row.status) {
            self.say(Note::DoesNotApply {
                kind,
                status: row.status,
                key: KeyId::of(&row),
            });
            return;
        }
        self.dialog = Some(Dialog {
            kind,
            target: Target::Key(row),
            reason: String::new(),
            status: match kind {
                ActKind::Complete => "200".into(),
                ActKind::Fail => "500".into(),
                _ => String::new(),
            },
            body: String::new(),
            focus: Field::Reason,
            error: None,
        });
    }

    /// The message a retry would apply to: the message detail's, or the selected one.
    fn target_message(&self) -> Option<&OutboxRow> {
        match &self.message {
            Some(detail) => detail.row.as_ref(),
            None if self.view == View::Outbox => self.outbox.selected_row(),
            None => None,
        }
    }

    /// Opens the dialog of a retry: of the selected message, or of `all` of them.
    fn open_retry(&mut self, all: bool) {
        let kind = if all {
            ActKind::RetryAll
        } else {
            ActKind::Retry
        };
        if self.read_only {
            self.say(Note::ReadOnly(kind));
            return;
        }
        let target = if all {
            Target::AllMessages
        } else {
            let Some(row) = self.target_message().cloned() else {
                self.say(Note::NothingSelected(kind));
                return;
            };
            if !row.retryable(self.now_ms) {
                self.say(Note::NotRetryable {
                    id: row.id,
                    dedup_id: row.dedup_id.clone(),
                    state: message_state(&row, self.now_ms),
                });
                return;
            }
            Target::Message(row)
        };
        self.dialog = Some(Dialog {
            kind,
            target,
            reason: String::new(),
            status: String::new(),
            body: String::new(),
            focus: Field::Reason,
            error: None,
        });
    }

    /// Shows `view`; the outbox and inbox views are read at once (each is read only while
    /// shown).
    fn switch_view(&mut self, view: View) -> Option<Command> {
        self.view = view;
        matches!(view, View::Outbox | View::Inbox).then(|| self.refresh())
    }

    /// Shows only events in `status` (`None`: every event), from a new listing.
    fn set_inbox_status(&mut self, status: Option<InboxStatus>) -> Command {
        self.inbox = Events {
            status,
            ..Events::default()
        };
        self.refresh()
    }

    /// Closes every detail pane.
    fn close_details(&mut self) {
        self.detail = None;
        self.message = None;
        self.event = None;
    }

    /// Shows only messages in `status` (`None`: every message), from a new listing.
    fn set_outbox_status(&mut self, status: Option<OutboxStatus>) -> Command {
        self.outbox = Messages {
            status,
            ..Messages::default()
        };
        self.refresh()
    }

    fn set_filters(&mut self, filters: Filters) -> Command {
        self.filters = filters;
        self.detail = None;
        self.relist()
    }

    /// Where keys go: the dialog, the prompt or the help while open, else the [`page`]
    /// shown.
    ///
    /// [`page`]: Self::page
    #[must_use]
    pub fn screen(&self) -> Screen {
        if self.dialog.is_some() {
            Screen::Dialog
        } else if self.prompt.is_some() {
            Screen::Prompt
        } else if self.help {
            Screen::Help
        } else {
            self.page()
        }
    }

    /// The screen shown, under a dialog or the help: a detail, else the view.
    #[must_use]
    pub fn page(&self) -> Screen {
        if self.detail.is_some() {
            return Screen::Detail;
        }
        if self.message.is_some() {
            return Screen::Message;
        }
        if self.event.is_some() {
            return Screen::Event;
        }
        match self.view {
            View::Keys => Screen::Keys,
            View::Operations => Screen::Operations,
            View::Outbox => Screen::Outbox,
            View::Inbox => Screen::Inbox,
        }
    }

    /// Opens the selected line: a key's detail, an operation's keys, a message's detail, an
    /// event's detail (shown as listed: the next refresh reads it again).
    fn open(&mut self) -> Option<Command> {
        match self.view {
            View::Keys => {
                let row = self.selected_row()?.clone();
                let key = KeyId::of(&row);
                self.detail = Some(Detail {
                    key: key.clone(),
                    row: Some(row),
                    audit: None,
                    journal: None,
                    scroll: 0,
                    loading: true,
                });
                Some(Command::LoadDetail { key })
            }
            View::Operations => {
                let line = self.operations.get(self.op_selected)?;
                let filters = Filters {
                    operation: Some(line.operation.clone()),
                    ..self.filters.clone()
                };
                self.view = View::Keys;
                Some(self.set_filters(filters))
            }
            View::Outbox => {
                let row = self.outbox.selected_row()?.clone();
                let id = row.id;
                self.message = Some(MessageDetail {
                    id,
                    row: Some(row),
                    audit: None,
                    scroll: 0,
                    loading: true,
                });
                Some(Command::LoadMessage { id })
            }
            View::Inbox => {
                let row = self.inbox.selected_row()?.clone();
                self.event = Some(EventDetail {
                    id: row.id,
                    event_id: row.event_id.clone(),
                    row: Some(row),
                    scroll: 0,
                });
                None
            }
        }
    }

    /// Scrolls the open detail (a key's, a message's or an event's) by `step`: a line, a
    /// page of ten, or to an end (its last line: a wrapped line counts once).
    fn scroll(&mut self, step: Step) {
        let lines = match (&self.detail, &self.message, &self.event) {
            (Some(detail), _, _) => detail.lines(self.now_ms, &self.tz).len(),
            (None, Some(message), _) => message.lines(self.now_ms, &self.tz).len(),
            (None, None, Some(event)) => event.lines(self.now_ms, &self.tz).len(),
            (None, None, None) => return,
        };
        let last = u16::try_from(lines.saturating_sub(1)).unwrap_or(u16::MAX);
        let scroll = match (&mut self.detail, &mut self.message, &mut self.event) {
            (Some(detail), _, _) => &mut detail.scroll,
            (None, Some(message), _) => &mut message.scroll,
            (None, None, Some(event)) => &mut event.scroll,
            (None, None, None) => return,
        };
        *scroll = match step {
            Step::Down => scroll.saturating_add(1).min(last),
            Step::Up => scroll.saturating_sub(1),
            Step::PageDown => scroll.saturating_add(10).min(last),
            Step::PageUp => scroll.saturating_sub(10),
            Step::Top => 0,
            Step::Bottom => last,
        };
    }
}

/// Applies `msg` to `app`; returns the database work it calls for.
pub fn update(app: &mut App, msg: Msg) -> Option<Command> {
    match msg {
        Msg::Key(key) => on_key(app, key),
        Msg::Tick { now_ms } => {
            app.now_ms = now_ms;
            let due = app
                .refresh_asked_ms
                .is_none_or(|at| now_ms - at >= REFRESH_EVERY_MS);
            let first = app.refreshed_at_ms.is_none() && app.refresh_asked_ms.is_none();
            if first || (!app.paused && !app.refreshing && due) {
                Some(app.refresh())
            } else {
                None
            }
        }
        Msg::Refreshed { generation, result } => {
            if generation != app.generation {
                return None;
            }
            app.refreshing = false;
            match result {
                Ok(refreshed) => {
                    let Refreshed {
                        counts,
                        operations,
                        page,
                        detail,
                        outbox_counts,
                        outbox,
                        message,
                        inbox,
                        event,
                    } = *refreshed;
                    let keep = app.selected_row().map(KeyId::of);
                    app.refreshed_at_ms = Some(app.now_ms);
                    let counts_read = counts.is_some();
                    if let Some(counts) = counts {
                        app.counts = Some(counts);
                        app.counted_at_ms = Some(app.now_ms);
                    }
                    if let Some(operations) = operations {
                        app.operations = operations;
                        app.op_selected =
                            app.op_selected.min(app.operations.len().saturating_sub(1));
                    }
                    app.rows = page.keys;
                    app.next = page.next;
                    app.resort(keep);
                    if let Some((key, result)) = detail {
                        apply_detail(app, &key, result);
                    }
                    if counts_read {
                        app.outbox_counts = outbox_counts;
                    }
                    if let Some((query, result)) = outbox {
                        apply_messages(app, query, result);
                    }
                    if let Some((id, result)) = message {
                        apply_message(app, id, result);
                    }
                    if let Some((query, result)) = inbox {
                        apply_events(app, query, result);
                    }
                    if let Some((event_id, result)) = event {
                        apply_event(app, &event_id, result);
                    }
                    if matches!(app.status, Some(Note::ReadFailed(Read::Refresh, _))) {
                        app.status = None;
                    }
                    // The first screen shows the keys at once; the counts follow.
                    if app.count_due() && (!app.paused || app.counts.is_none()) {
                        return Some(app.refresh());
                    }
                    app.maybe_load_more()
                }
                Err(e) => {
                    app.say(Note::ReadFailed(Read::Refresh, e));
                    None
                }
            }
        }
        Msg::MoreLoaded { generation, result } => {
            if generation != app.generation {
                return None;
            }
            app.loading_more = false;
            match result {
                Ok(page) => {
                    let keep = app.selected_row().map(KeyId::of);
                    let known: std::collections::HashSet<KeyId> =
                        app.rows.iter().map(KeyId::of).collect();
                    app.rows.extend(
                        page.keys
                            .into_iter()
                            .filter(|r| !known.contains(&KeyId::of(r))),
                    );
                    app.next = page.next;
                    app.resort(keep);
                    None
                }
                Err(e) => {
                    app.say(Note::ReadFailed(Read::MoreKeys, e));
                    None
                }
            }
        }
        Msg::DetailLoaded { key, result } => {
            apply_detail(app, &key, result.map(|data| *data));
            None
        }
        Msg::Acted {
            key,
            action,
            result,
        } => {
            app.acting = false;
            match result {
                Ok(audit_id) => app.say(Note::Acted {
                    action,
                    key,
                    audit_id,
                }),
                Err(error) => {
                    if let ActError::Changed(current) = &error {
                        replace_row(app, &key, current.as_deref().cloned());
                    }
                    app.say(Note::NotActed { action, key, error });
                }
            }
            app.counted_at_ms = None;
            Some(app.refresh())
        }
        Msg::MessageLoaded { id, result } => {
            apply_message(app, id, result.map(|data| *data));
            None
        }
        Msg::Retried { id, result } => {
            app.acting = false;
            match result {
                Ok(Retried::One(row)) => {
                    app.say(Note::RetriedOne {
                        id: row.id,
                        dedup_id: row.dedup_id.clone(),
                    });
                    replace_message(app, *row);
                }
                Ok(Retried::All(n)) => app.say(Note::RetriedAll(n)),
                Err(error) => app.say(Note::NotRetried { of: id, error }),
            }
            app.counted_at_ms = None;
            Some(app.refresh())
        }
    }
}

/// A listing of the outbox arrived: shown if it is for the filter in force, keeping the
/// selected message.
fn apply_messages(app: &mut App, query: OutboxQuery, result: Result<Vec<OutboxRow>, Failure>) {
    if query.status != app.outbox.status {
        return;
    }
    let keep = app.outbox.selected_row().map(|row| row.id);
    app.outbox.loaded = true;
    match result {
        Ok(rows) => {
            app.outbox.rows = rows;
            app.outbox.error = None;
            if let Some(at) = keep.and_then(|id| app.outbox.rows.iter().position(|r| r.id == id)) {
                app.outbox.selected = at;
            }
            app.outbox.selected = app
                .outbox
                .selected
                .min(app.outbox.rows.len().saturating_sub(1));
        }
        Err(e) => app.outbox.error = Some(e),
    }
}

/// A listing of the inbox arrived: shown if it is for the filter in force, keeping the
/// selected event.
fn apply_events(app: &mut App, query: InboxQuery, result: Result<Vec<InboxEvent>, Failure>) {
    if query.status != app.inbox.status {
        return;
    }
    let keep = app.inbox.selected_row().map(|row| row.id);
    app.inbox.loaded = true;
    match result {
        Ok(rows) => {
            app.inbox.rows = rows;
            app.inbox.error = None;
            if let Some(at) = keep.and_then(|id| app.inbox.rows.iter().position(|r| r.id == id)) {
                app.inbox.selected = at;
            }
            app.inbox.selected = app
                .inbox
                .selected
                .min(app.inbox.rows.len().saturating_sub(1));
        }
        Err(e) => app.inbox.error = Some(e),
    }
}

/// A read of the events of `event_id` arrived: the open event detail's row, if it is one of
/// them (`None`: it left the inbox).
fn apply_event(app: &mut App, event_id: &str, result: Result<Vec<InboxEvent>, Failure>) {
    let Some(detail) = &mut app.event else {
        return;
    };
    if detail.event_id != event_id {
        return;
    }
    match result {
        Ok(rows) => detail.row = rows.into_iter().find(|row| row.id == detail.id),
        Err(e) => app.say(Note::ReadFailed(Read::Event(event_id.to_owned()), e)),
    }
}

/// A read of message `id` arrived: shown if its detail is still open.
fn apply_message(app: &mut App, id: i64, result: Result<MessageData, Failure>) {
    let Some(detail) = &mut app.message else {
        return;
    };
    if detail.id != id {
        return;
    }
    detail.loading = false;
    match result {
        Ok(data) => {
            detail.row = data.row;
            detail.audit = Some(data.audit);
        }
        Err(e) => app.say(Note::ReadFailed(Read::Message(id), e)),
    }
}

/// Puts `row` in place of its message everywhere it is shown.
fn replace_message(app: &mut App, row: OutboxRow) {
    if let Some(shown) = app.outbox.rows.iter_mut().find(|r| r.id == row.id) {
        *shown = row.clone();
    }
    if let Some(detail) = &mut app.message
        && detail.id == row.id
    {
        detail.row = Some(row);
    }
}

/// Puts `current` in place of `key`'s row everywhere it is shown.
fn replace_row(app: &mut App, key: &KeyId, current: Option<KeyRow>) {
    let keep = app.selected_row().map(KeyId::of);
    if let Some(at) = app.rows.iter().position(|r| KeyId::of(r) == *key) {
        match &current {
            Some(row) => app.rows[at] = row.clone(),
            None => {
                app.rows.remove(at);
            }
        }
    }
    app.resort(keep);
    if let Some(detail) = &mut app.detail
        && detail.key == *key
    {
        detail.row = current;
    }
}

fn apply_detail(app: &mut App, key: &KeyId, result: Result<DetailData, Failure>) {
    let Some(detail) = &mut app.detail else {
        return;
    };
    if detail.key != *key {
        return;
    }
    detail.loading = false;
    match result {
        Ok(data) => {
            detail.row = data.row;
            detail.audit = Some(data.audit);
            detail.journal = Some(data.journal);
        }
        Err(e) => app.say(Note::ReadFailed(Read::Key(key.clone()), e)),
    }
}

/// A key: looked up in the [`keymap`] for the screen it is pressed on, then done.
fn on_key(app: &mut App, key: KeyEvent) -> Option<Command> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let screen = app.screen();
    if screen == Screen::Help {
        // Any key closes the help, and does nothing else but quit.
        app.help = false;
    }
    let Some(action) = keymap::action(screen, &key) else {
        // Not bound: text for a dialog's field or the prompt.
        return match screen {
            Screen::Dialog => on_dialog_key(app, key),
            Screen::Prompt => on_prompt_key(app, key),
            _ => None,
        };
    };
    match action {
        Do::Quit => app.quit = true,
        Do::Help => app.help = true,
        Do::Pause => {
            app.paused = !app.paused;
            app.say(Note::Paused(app.paused));
            if !app.paused && !app.refreshing {
                return Some(app.refresh());
            }
        }
        Do::Refresh => return Some(app.refresh()),
        Do::Move(step) if matches!(screen, Screen::Detail | Screen::Message | Screen::Event) => {
            app.scroll(step);
        }
        Do::Move(step) => {
            let page = isize::try_from(app.page_height.max(1)).unwrap_or(10);
            return app.move_selection(match step {
                Step::Down => 1,
                Step::Up => -1,
                Step::PageDown => page,
                Step::PageUp => -page,
                Step::Top => isize::MIN / 2,
                Step::Bottom => isize::MAX / 2,
            });
        }
        Do::Open => return app.open(),
        Do::Back => app.close_details(),
        Do::NextView => {
            app.close_details();
            return app.switch_view(app.view.next());
        }
        Do::PreviousView => return app.switch_view(app.view.previous()),
        Do::Search => {
            app.close_details();
            app.view = View::Keys;
            app.prompt = Some(Prompt {
                text: app.filters.key_prefix.clone().unwrap_or_default(),
            });
        }
        Do::CycleStatus if screen == Screen::Outbox => {
            let status = match app.outbox.status {
                None => Some(OutboxStatus::Pending),
                Some(OutboxStatus::Pending) => Some(OutboxStatus::Delivered),
                Some(OutboxStatus::Delivered) => Some(OutboxStatus::Dead),
                Some(OutboxStatus::Dead) => None,
            };
            app.say(Note::Filter(FilterSet::Outbox(status)));
            return Some(app.set_outbox_status(status));
        }
        Do::CycleStatus if screen == Screen::Inbox => {
            let status = match app.inbox.status {
                None => Some(InboxStatus::Waiting),
                Some(InboxStatus::Waiting) => Some(InboxStatus::Unmatched),
                Some(InboxStatus::Unmatched) => None,
            };
            app.say(Note::Filter(FilterSet::Inbox(status)));
            return Some(app.set_inbox_status(status));
        }
        Do::CycleStatus => {
            let mut filters = app.filters.clone();
            filters.status = match filters.status {
                None => Some(KeyStatus::ALL[0]),
                Some(status) => KeyStatus::ALL
                    .iter()
                    .position(|s| *s == status)
                    .and_then(|i| KeyStatus::ALL.get(i + 1).copied()),
            };
            app.say(Note::Filter(FilterSet::Keys(filters.status)));
            return Some(app.set_filters(filters));
        }
        Do::FilterOperation => {
            let mut filters = app.filters.clone();
            if filters.operation.is_some() {
                filters.operation = None;
            } else if let Some(row) = app.selected_row() {
                filters.operation = Some(row.operation.clone());
            } else {
                return None;
            }
            return Some(app.set_filters(filters));
        }
        Do::FilterScope => {
            let mut filters = app.filters.clone();
            if filters.scope.is_some() {
                filters.scope = None;
            } else if let Some(row) = app.selected_row() {
                filters.scope = Some(row.scope.clone());
            } else {
                return None;
            }
            return Some(app.set_filters(filters));
        }
        Do::ClearFilters if screen == Screen::Outbox => {
            if app.outbox.status.is_some() {
                app.say(Note::Cleared(Cleared::Outbox));
                return Some(app.set_outbox_status(None));
            }
        }
        Do::ClearFilters if screen == Screen::Inbox => {
            if app.inbox.status.is_some() {
                app.say(Note::Cleared(Cleared::Inbox));
                return Some(app.set_inbox_status(None));
            }
        }
        Do::ClearFilters => {
            if app.filters != Filters::default() {
                app.say(Note::Cleared(Cleared::Keys));
                return Some(app.set_filters(Filters::default()));
            }
        }
        Do::Sort => {
            // The keymap binds `0`…`7`.
            let KeyCode::Char(c @ '0'..='7') = key.code else {
                return None;
            };
            let keep = app.selected_row().map(KeyId::of);
            let index = usize::from(u8::try_from(c).unwrap_or(b'0') - b'0');
            app.sort = match (index, app.sort) {
                (0, _) => None,
                (n, Some((column, descending))) if Column::ALL[n - 1] == column => {
                    Some((column, !descending))
                }
                (n, _) => Some((Column::ALL[n - 1], false)),
            };
            app.resort(keep);
        }
        Do::Expire => app.open_dialog(ActKind::Expire),
        Do::Release => app.open_dialog(ActKind::Release),
        Do::Complete => app.open_dialog(ActKind::Complete),
        Do::Fail => app.open_dialog(ActKind::Fail),
        Do::Delete => app.open_dialog(ActKind::Delete),
        Do::Retry => app.open_retry(false),
        Do::RetryAll => app.open_retry(true),
        Do::KeysOnly => {
            if let KeyCode::Char(c) = key.code {
                app.say(Note::KeysOnly {
                    pressed: c,
                    inbox: matches!(screen, Screen::Inbox | Screen::Event),
                });
            }
        }
    }
    None
}

/// The keys of the `/` prompt: they type the prefix; `Enter` applies it, `Esc` cancels.
fn on_prompt_key(app: &mut App, key: KeyEvent) -> Option<Command> {
    let prompt = app.prompt.as_mut()?;
    match key.code {
        KeyCode::Esc => app.prompt = None,
        KeyCode::Enter => {
            let text = prompt.text.clone();
            app.prompt = None;
            let mut filters = app.filters.clone();
            filters.key_prefix = (!text.is_empty()).then_some(text);
            return Some(app.set_filters(filters));
        }
        KeyCode::Backspace => {
            prompt.text.pop();
        }
        KeyCode::Char(c) => prompt.text.push(c),
        _ => {}
    }
    None
}

fn on_dialog_key(app: &mut App, key: KeyEvent) -> Option<Command> {
    let Some(dialog) = &mut app.dialog else {
        return None;
    };
    match key.code {
        KeyCode::Esc => {
            app.dialog = None;
            app.say(Note::Cancelled);
        }
        KeyCode::Tab | KeyCode::Down => dialog.step(true),
        KeyCode::BackTab | KeyCode::Up => dialog.step(false),
        KeyCode::Enter if dialog.focus != Field::Confirm => dialog.step(true),
        KeyCode::Char('n') if dialog.focus == Field::Confirm => {
            app.dialog = None;
            app.say(Note::Cancelled);
        }
        KeyCode::Char('y')
            if dialog.focus == Field::Confirm && !matches!(dialog.target, Target::Key(_)) =>
        {
            match dialog.reason() {
                Ok(reason) => {
                    let id = match &dialog.target {
                        Target::Message(row) => Some(row.id),
                        _ => None,
                    };
                    app.dialog = None;
                    app.acting = true;
                    app.say(Note::Retrying(id));
                    return Some(Command::Retry { id, reason });
                }
                Err(e) => {
                    dialog.error = Some(e);
                    dialog.focus = Field::Reason;
                }
            }
        }
        KeyCode::Char('y') if dialog.focus == Field::Confirm => match dialog.action() {
            Ok(action) => {
                let reason = dialog.reason.trim().to_owned();
                let Target::Key(shown) = dialog.target.clone() else {
                    return None;
                };
                let key = KeyId::of(&shown);
                app.dialog = None;
                app.acting = true;
                app.say(Note::Acting {
                    action: action.name(),
                    key: key.clone(),
                });
                return Some(Command::Act {
                    key,
                    expected: Box::new(shown),
                    action,
                    reason,
                });
            }
            Err(e) => {
                dialog.error = Some(e);
                if dialog.reason.trim().is_empty() {
                    dialog.focus = Field::Reason;
                } else {
                    dialog.focus = Field::Status;
                }
            }
        },
        KeyCode::Backspace => {
            if let Some(field) = dialog.field_mut() {
                field.pop();
            }
        }
        KeyCode::Char(c) => {
            if let Some(field) = dialog.field_mut() {
                field.push(c);
            }
        }
        _ => {}
    }
    None
}

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
