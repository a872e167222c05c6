//! The UI's state ([`App`]): the views, and what they share — the view shown, the dialog,
//! the status line, the live refresh. [`update`] applies a [`Msg`] and returns the
//! [`Command`] to run, if any: a key goes to the dialog, the prompt or the view shown (what
//! the [`keymap`] finds for it), a database result to the views it is for, and what a view
//! asks for ([`Action`]) is done here. Pure, so every transition is a unit test.

use idem_store::InboxEvent;
use jiff::tz::TimeZone;
use ratatui::crossterm::event::{KeyEvent, KeyEventKind};

use super::act::KeyId;
use super::dialog::{Answer, Dialog};
use super::keymap::{self, Do, Screen};
use super::note::{ActError, Failure};
use super::note::{Note, Read};
use super::views::inbox::InboxView;
use super::views::keys::KeysView;
use super::views::operations::OperationsView;
use super::views::outbox::OutboxView;
use super::views::{Action, Component, Context, Input};
use super::work::{Command, DetailData, MessageData, Msg, Refreshed, Retried};

/// How often the keys and an open detail are read again, unless paused.
pub const REFRESH_EVERY_MS: i64 = 2_000;
/// How often the counts (and the operations view) are read again: they are one pass over
/// the whole key table, so less often than the keys, and never for the first screen.
pub const COUNT_EVERY_MS: i64 = 10_000;

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

/// Who runs the UI, against what: fixed from its start.
#[derive(Debug, Clone)]
pub struct Session {
    /// The database, redacted.
    pub database: String,
    /// Who acts (recorded in the audit trail).
    pub operator: String,
    /// Every action is refused.
    pub read_only: bool,
    /// Where local times are shown.
    pub tz: TimeZone,
}

impl Session {
    /// What the views read of the shared state: this session's, the clock at `now_ms`,
    /// whether `live` is refreshing, and the lists' `page_height`.
    #[must_use]
    pub fn context(&self, live: &Live, now_ms: i64, page_height: usize) -> Context<'_> {
        Context {
            now_ms,
            tz: &self.tz,
            read_only: self.read_only,
            refreshing: live.refreshing,
            page_height,
        }
    }
}

/// The live refresh: when what is shown was read, and when the counts were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// Live refresh is paused.
    pub paused: bool,
    /// A refresh of the current listing is under way.
    pub refreshing: bool,
    /// When the last refresh was asked for.
    pub asked_ms: Option<i64>,
    /// When the last refresh arrived.
    pub refreshed_at_ms: Option<i64>,
    /// When the counts shown were read; `None` before, and after an action (they are
    /// stale then).
    pub counted_at_ms: Option<i64>,
}

impl Live {
    /// Whether a refresh at `now_ms` counts: not for the first screen (the keys come
    /// first), then every [`COUNT_EVERY_MS`] and after an action.
    #[must_use]
    pub fn count_due(&self, now_ms: i64) -> bool {
        self.refreshed_at_ms.is_some()
            && self
                .counted_at_ms
                .is_none_or(|at| now_ms - at >= COUNT_EVERY_MS)
    }

    /// Whether a tick at `now_ms` starts a refresh: the first, and then every
    /// [`REFRESH_EVERY_MS`] unless paused or one is under way.
    #[must_use]
    pub fn due(&self, now_ms: i64) -> bool {
        let first = self.refreshed_at_ms.is_none() && self.asked_ms.is_none();
        let due = self
            .asked_ms
            .is_none_or(|at| now_ms - at >= REFRESH_EVERY_MS);
        first || (!self.paused && !self.refreshing && due)
    }
}

/// Everything the screen shows.
#[derive(Debug, Clone)]
pub struct App {
    /// Who runs the UI, against what.
    pub session: Session,
    /// The clock, as last ticked: milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// The view shown.
    pub view: View,
    /// The key table.
    pub keys: KeysView,
    /// The operations view.
    pub operations: OperationsView,
    /// The outbox view.
    pub outbox: OutboxView,
    /// The inbox view.
    pub inbox: InboxView,
    /// The live refresh.
    pub live: Live,
    /// The action dialog, while open.
    pub dialog: Option<Dialog>,
    /// An action is under way.
    pub acting: bool,
    /// The status line.
    pub status: Option<Note>,
    /// The help overlay is shown.
    pub help: bool,
    /// Lines of a list on screen, for PageUp/PageDown.
    pub page_height: usize,
    /// The user asked to quit.
    pub quit: bool,
}

impl App {
    /// A fresh UI, nothing loaded yet: the first [`Msg::Tick`] asks for a refresh.
    #[must_use]
    pub fn new(database: String, operator: String, read_only: bool, tz: TimeZone) -> Self {
        Self {
            session: Session {
                database,
                operator,
                read_only,
                tz,
            },
            now_ms: 0,
            view: View::Keys,
            keys: KeysView::default(),
            operations: OperationsView::default(),
            outbox: OutboxView::default(),
            inbox: InboxView::default(),
            live: Live::default(),
            dialog: None,
            acting: false,
            status: None,
            help: false,
            page_height: 10,
            quit: false,
        }
    }

    /// What the views read of the shared state.
    #[must_use]
    pub fn context(&self) -> Context<'_> {
        self.session
            .context(&self.live, self.now_ms, self.page_height)
    }

    /// The view shown.
    #[must_use]
    pub fn current(&self) -> &dyn Component {
        match self.view {
            View::Keys => &self.keys,
            View::Operations => &self.operations,
            View::Outbox => &self.outbox,
            View::Inbox => &self.inbox,
        }
    }

    /// Where keys go: the dialog, the prompt or the help while open, else the [`page`]
    /// shown.
    ///
    /// [`page`]: Self::page
    #[must_use]
    pub fn screen(&self) -> Screen {
        if self.dialog.is_some() {
            Screen::Dialog
        } else if self.keys.prompt.is_some() {
            Screen::Prompt
        } else if self.help {
            Screen::Help
        } else {
            self.page()
        }
    }

    /// The screen shown, under a dialog or the help: the view's detail, else its list.
    #[must_use]
    pub fn page(&self) -> Screen {
        self.current().screen()
    }

    fn say(&mut self, note: Note) {
        self.status = Some(note);
    }

    /// A refresh of everything shown, now: the keys (and the detail's), the counts when
    /// due, the outbox's or the inbox's listing (and detail) while its view is shown.
    fn refresh(&mut self) -> Command {
        self.live.refreshing = true;
        self.live.asked_ms = Some(self.now_ms);
        let (filter, detail) = self.keys.refresh_query();
        Command::Refresh {
            generation: self.keys.generation,
            count: self.live.count_due(self.now_ms),
            filter,
            detail,
            outbox: (self.view == View::Outbox || self.outbox.detail.is_some())
                .then(|| self.outbox.query()),
            message: self.outbox.detail.as_ref().map(|m| m.id),
            inbox: (self.view == View::Inbox || self.inbox.detail.is_some())
                .then(|| self.inbox.query()),
            event: self.inbox.detail.as_ref().map(|e| e.event_id.clone()),
        }
    }

    /// Does what a view asked for; returns the database work it calls for.
    fn act(&mut self, action: Option<Action>) -> Option<Command> {
        match action? {
            Action::Run(command) => Some(command),
            Action::Refresh(note) => {
                if let Some(note) = note {
                    self.say(note);
                }
                Some(self.refresh())
            }
            Action::Say(note) => {
                self.say(note);
                None
            }
            Action::Confirm(dialog) => {
                self.dialog = Some(dialog);
                None
            }
            Action::KeysOf(operation) => {
                self.view = View::Keys;
                self.keys.show_operation(operation);
                Some(self.refresh())
            }
        }
    }

    /// Closes every detail pane.
    fn close_details(&mut self) {
        self.keys.close_detail();
        self.outbox.close_detail();
        self.inbox.close_detail();
    }

    /// Shows `view`; the outbox and inbox views are read at once (each is read only while
    /// shown).
    fn switch_view(&mut self, view: View) -> Option<Command> {
        self.view = view;
        matches!(view, View::Outbox | View::Inbox).then(|| self.refresh())
    }

    /// A key: to the dialog or the prompt while open (where unbound keys type), else what
    /// the [`keymap`] binds it to on the screen shown, done here or by the view.
    fn on_key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let screen = self.screen();
        if screen == Screen::Help {
            // Any key closes the help, and does nothing else but quit.
            self.help = false;
        }
        let Some(what) = keymap::action(screen, &key) else {
            // Not bound: text for a dialog's field or the prompt.
            return match screen {
                Screen::Dialog => self.on_dialog_key(key),
                Screen::Prompt => {
                    let action = self.keys.on_prompt_key(key.code);
                    self.act(action)
                }
                _ => None,
            };
        };
        match what {
            Do::Quit => self.quit = true,
            Do::Help => self.help = true,
            Do::Pause => {
                self.live.paused = !self.live.paused;
                self.say(Note::Paused(self.live.paused));
                if !self.live.paused && !self.live.refreshing {
                    return Some(self.refresh());
                }
            }
            Do::Refresh => return Some(self.refresh()),
            Do::NextView => {
                self.close_details();
                return self.switch_view(self.view.next());
            }
            Do::PreviousView => return self.switch_view(self.view.previous()),
            Do::Search => {
                self.close_details();
                self.view = View::Keys;
                self.keys.open_prompt();
            }
            _ => {
                return self.route(Input {
                    what,
                    code: key.code,
                });
            }
        }
        None
    }

    /// A key for the view shown; on the operations view, the filter keys are the key
    /// table's.
    fn route(&mut self, input: Input) -> Option<Command> {
        let ctx = self
            .session
            .context(&self.live, self.now_ms, self.page_height);
        let action = match self.view {
            View::Operations if matches!(input.what, Do::CycleStatus | Do::ClearFilters) => {
                self.keys.update(input, &ctx)
            }
            View::Keys => self.keys.update(input, &ctx),
            View::Operations => self.operations.update(input, &ctx),
            View::Outbox => self.outbox.update(input, &ctx),
            View::Inbox => self.inbox.update(input, &ctx),
        };
        self.act(action)
    }

    /// A key typed in the dialog; its answer done.
    fn on_dialog_key(&mut self, key: KeyEvent) -> Option<Command> {
        match self.dialog.as_mut()?.on_key(key.code)? {
            Answer::Cancelled => {
                self.dialog = None;
                self.say(Note::Cancelled);
                None
            }
            Answer::Confirmed { note, command } => {
                self.dialog = None;
                self.acting = true;
                self.say(*note);
                Some(*command)
            }
        }
    }

    /// The clock moved on: a refresh, when one is due.
    fn tick(&mut self, now_ms: i64) -> Option<Command> {
        self.now_ms = now_ms;
        self.live.due(now_ms).then(|| self.refresh())
    }

    /// A refresh arrived: each view its part, in the order they are drawn.
    fn refreshed(
        &mut self,
        generation: u64,
        result: Result<Box<Refreshed>, Failure>,
    ) -> Option<Command> {
        if generation != self.keys.generation {
            return None;
        }
        self.live.refreshing = false;
        let refreshed = match result {
            Ok(refreshed) => *refreshed,
            Err(e) => {
                self.say(Note::ReadFailed(Read::Refresh, e));
                return None;
            }
        };
        self.live.refreshed_at_ms = Some(self.now_ms);
        let counted = refreshed.counts.is_some();
        if counted {
            self.keys.counts = refreshed.counts;
            self.live.counted_at_ms = Some(self.now_ms);
            // A database without the outbox's table still shows its keys.
            self.outbox.counts = refreshed.outbox_counts;
        }
        if let Some(operations) = refreshed.operations {
            self.operations.counted(operations);
        }
        self.keys.listed(refreshed.page, self.now_ms);
        for note in self.apply_details(refreshed.detail, refreshed.message, refreshed.event) {
            self.say(note);
        }
        if let Some((query, result)) = refreshed.outbox {
            self.outbox.listed(query, result);
        }
        if let Some((query, result)) = refreshed.inbox {
            self.inbox.listed(query, result);
        }
        if matches!(self.status, Some(Note::ReadFailed(Read::Refresh, _))) {
            self.status = None;
        }
        // The first screen shows the keys at once; the counts follow.
        if self.live.count_due(self.now_ms) && (!self.live.paused || self.keys.counts.is_none()) {
            return Some(self.refresh());
        }
        self.keys.maybe_load_more(self.live.refreshing)
    }

    /// A refresh's reads of the open details: each to its view; what failed to read.
    fn apply_details(
        &mut self,
        detail: Option<(KeyId, Result<DetailData, Failure>)>,
        message: Option<(i64, Result<MessageData, Failure>)>,
        event: Option<(String, Result<Vec<InboxEvent>, Failure>)>,
    ) -> Vec<Note> {
        let key = detail.and_then(|(key, result)| self.keys.detail_loaded(&key, result));
        let message = message.and_then(|(id, result)| self.outbox.message_loaded(id, result));
        let event = event.and_then(|(id, result)| self.inbox.event_loaded(&id, result));
        [key, message, event].into_iter().flatten().collect()
    }

    /// An action on `key` finished: said; the key as it is now, if it changed; everything
    /// read again, the counts too.
    fn acted(
        &mut self,
        key: KeyId,
        action: &'static str,
        result: Result<i64, ActError>,
    ) -> Command {
        self.acting = false;
        match result {
            Ok(audit_id) => self.say(Note::Acted {
                action,
                key,
                audit_id,
            }),
            Err(error) => {
                if let ActError::Changed(current) = &error {
                    let current = current.as_deref().cloned();
                    self.keys.changed(&key, current, self.now_ms);
                }
                self.say(Note::NotActed { action, key, error });
            }
        }
        self.live.counted_at_ms = None;
        self.refresh()
    }

    /// A retry finished: said; the message as it is now; everything read again, the counts
    /// too.
    fn retried(&mut self, id: Option<i64>, result: Result<Retried, ActError>) -> Command {
        self.acting = false;
        match result {
            Ok(Retried::One(row)) => {
                self.say(Note::RetriedOne {
                    id: row.id,
                    dedup_id: row.dedup_id.clone(),
                });
                self.outbox.retried(*row);
            }
            Ok(Retried::All(n)) => self.say(Note::RetriedAll(n)),
            Err(error) => self.say(Note::NotRetried { of: id, error }),
        }
        self.live.counted_at_ms = None;
        self.refresh()
    }
}

/// Applies `msg` to `app`; returns the database work it calls for.
pub fn update(app: &mut App, msg: Msg) -> Option<Command> {
    match msg {
        Msg::Key(key) => app.on_key(key),
        Msg::Tick { now_ms } => app.tick(now_ms),
        Msg::Refreshed { generation, result } => app.refreshed(generation, result),
        Msg::MoreLoaded { generation, result } => {
            if generation == app.keys.generation
                && let Some(note) = app.keys.more_loaded(result, app.now_ms)
            {
                app.say(note);
            }
            None
        }
        Msg::DetailLoaded { key, result } => {
            if let Some(note) = app.keys.detail_loaded(&key, result.map(|data| *data)) {
                app.say(note);
            }
            None
        }
        Msg::Acted {
            key,
            action,
            result,
        } => Some(app.acted(key, action, result)),
        Msg::MessageLoaded { id, result } => {
            if let Some(note) = app.outbox.message_loaded(id, result.map(|data| *data)) {
                app.say(note);
            }
            None
        }
        Msg::Retried { id, result } => Some(app.retried(id, result)),
    }
}

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
