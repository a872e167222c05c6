//! The outbox view: the transactional outbox's messages, oldest first, filtered by status;
//! a message's detail pane; and the retries, of the message selected (or shown) or of
//! every one a retry applies to, each through its dialog.

use idem_store::{AuditEntry, OutboxCounts, OutboxRow, OutboxStatus};
use jiff::tz::TimeZone;
use ratatui::Frame;
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row};

use super::list::{self, Listing, delta, filter_span};
use super::{Action, Component, Context, Input};
use crate::ui::detail;
use crate::ui::dialog::Dialog;
use crate::ui::format::{self, message_style};
use crate::ui::keymap::{Do, Screen, Step};
use crate::ui::note::{Cleared, Failure, FilterSet, Note, Read};
use crate::ui::work::{Command, MessageData, OutboxQuery};

/// The most messages the outbox view reads (the store lists them oldest first, without
/// pages).
pub const MESSAGES: u32 = 500;

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

/// The outbox view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutboxView {
    /// The messages as last read, oldest first (at most [`MESSAGES`]).
    pub list: Listing<OutboxRow>,
    /// Only messages in this status.
    pub status: Option<OutboxStatus>,
    /// The outbox's counts, read with the keys' counts.
    pub counts: Option<OutboxCounts>,
    /// The detail pane of a message, while open.
    pub detail: Option<MessageDetail>,
}

impl OutboxView {
    /// The listing to read: its filter and its size.
    #[must_use]
    pub fn query(&self) -> OutboxQuery {
        OutboxQuery {
            status: self.status,
            limit: MESSAGES,
        }
    }

    /// A listing arrived: shown if it is for the filter in force, keeping the selected
    /// message.
    pub fn listed(&mut self, query: OutboxQuery, result: Result<Vec<OutboxRow>, Failure>) {
        if query.status == self.status {
            self.list.arrived(result, |row| row.id);
        }
    }

    /// A read of message `id` arrived: shown if its detail is still open.
    pub fn message_loaded(
        &mut self,
        id: i64,
        result: Result<MessageData, Failure>,
    ) -> Option<Note> {
        let detail = self.detail.as_mut().filter(|d| d.id == id)?;
        detail.loading = false;
        match result {
            Ok(data) => {
                detail.row = data.row;
                detail.audit = Some(data.audit);
                None
            }
            Err(e) => Some(Note::ReadFailed(Read::Message(id), e)),
        }
    }

    /// Puts `row` in place of its message wherever it is shown.
    pub fn retried(&mut self, row: OutboxRow) {
        if let Some(shown) = self.list.rows.iter_mut().find(|r| r.id == row.id) {
            *shown = row.clone();
        }
        if let Some(detail) = &mut self.detail
            && detail.id == row.id
        {
            detail.row = Some(row);
        }
    }

    /// Shows only messages in `status` (`None`: every message), from a new listing.
    fn set_status(&mut self, status: Option<OutboxStatus>) {
        self.list = Listing::default();
        self.status = status;
    }

    /// The next status filter: pending, delivered, dead, then none.
    fn cycle_status(&mut self) -> Action {
        let status = match self.status {
            None => Some(OutboxStatus::Pending),
            Some(OutboxStatus::Pending) => Some(OutboxStatus::Delivered),
            Some(OutboxStatus::Delivered) => Some(OutboxStatus::Dead),
            Some(OutboxStatus::Dead) => None,
        };
        self.set_status(status);
        Action::Refresh(Some(Note::Filter(FilterSet::Outbox(status))))
    }

    /// Opens the selected message's detail; its reads follow.
    fn open(&mut self) -> Option<Action> {
        let row = self.list.selected_row()?.clone();
        let id = row.id;
        self.detail = Some(MessageDetail {
            id,
            row: Some(row),
            audit: None,
            scroll: 0,
            loading: true,
        });
        Some(Action::Run(Command::LoadMessage { id }))
    }

    /// Moves the selection, or scrolls the open detail.
    fn step(&mut self, step: Step, ctx: &Context<'_>) {
        match &mut self.detail {
            Some(detail) => {
                let lines = detail.lines(ctx.now_ms, ctx.tz).len();
                list::scroll(&mut detail.scroll, step, lines);
            }
            None => self.list.move_by(delta(step, ctx.page_height)),
        }
    }

    /// The message a retry applies to: the detail's, or the selected one.
    fn target(&self) -> Option<&OutboxRow> {
        match &self.detail {
            Some(detail) => detail.row.as_ref(),
            None => self.list.selected_row(),
        }
    }

    /// The header's counts: the messages by status and the oldest pending one, once
    /// counted.
    #[must_use]
    pub fn summary(&self, now_ms: i64) -> Vec<Span<'static>> {
        let Some(counts) = &self.counts else {
            return vec![Span::raw("counting…")];
        };
        let styled = |text: String, style: Style, n: u64| {
            Span::styled(text, if n > 0 { style } else { Style::new() })
        };
        let mut spans = vec![
            styled(
                format!("pending {}", counts.pending),
                Style::new().yellow(),
                counts.pending,
            ),
            styled(
                format!(" ({} in flight)", counts.in_flight),
                Style::new().cyan(),
                counts.in_flight,
            ),
            Span::raw(format!("  delivered {}  ", counts.delivered)),
            styled(
                format!("dead {}", counts.dead),
                Style::new().red().bold(),
                counts.dead,
            ),
        ];
        if let Some(oldest) = counts.oldest_pending_ms {
            spans.push(Span::styled(
                format!("  oldest pending {}", format::relative(oldest, now_ms)),
                Style::new().dim(),
            ));
        }
        spans
    }

    /// The header's filter: the status.
    #[must_use]
    pub fn filter_spans(&self) -> Vec<Span<'static>> {
        vec![filter_span("status", self.status.map(OutboxStatus::as_str))]
    }

    /// How many messages are dead, when any is: said in every view.
    #[must_use]
    pub fn dead(&self) -> Option<u64> {
        self.counts.map(|c| c.dead).filter(|&dead| dead > 0)
    }

    fn draw_list(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let rows = &self.list.rows;
        let filtered = self.status.map_or_else(String::new, |s| format!(" {s}"));
        let capped = if rows.len() >= usize::try_from(MESSAGES).unwrap_or(usize::MAX) {
            format!(", the first {MESSAGES}")
        } else {
            String::new()
        };
        let title = format!(
            " {}{filtered} {} (oldest first{capped}; Enter: one, r: retry) ",
            rows.len(),
            crate::ui::note::plural(rows.len() as u64, "message", "messages")
        );
        let header = Row::new([
            "id",
            "dedup id",
            "topic",
            "status",
            "att",
            "next",
            "age",
            "last error",
        ]);
        let widths = [
            Constraint::Length(5),
            Constraint::Fill(3),
            Constraint::Fill(2),
            Constraint::Length(9),
            Constraint::Length(3),
            Constraint::Length(9),
            Constraint::Length(6),
            Constraint::Fill(3),
        ];
        let cells = rows.iter().map(|row| message_row(row, ctx.now_ms));
        let table = list::table(header, cells, widths, title);
        let empty =
            rows.is_empty()
                .then(|| match (&self.list.error, self.list.loaded, self.status) {
                    (Some(e), _, _) => format!("the outbox cannot be read: {e}"),
                    (None, false, _) => "loading…".to_owned(),
                    (None, true, None) => "no messages".to_owned(),
                    (None, true, Some(status)) => {
                        format!("no {status} messages (x clears the filter)")
                    }
                });
        list::draw_table(frame, area, table, self.list.selected, empty);
    }
}

/// A message's row in the table.
fn message_row(row: &OutboxRow, now_ms: i64) -> Row<'static> {
    Row::new(vec![
        Cell::from(row.id.to_string()),
        Cell::from(row.dedup_id.clone()),
        Cell::from(row.topic.clone()),
        Cell::from(Span::styled(
            row.status.as_str(),
            message_style(row, now_ms),
        )),
        Cell::from(row.attempts.to_string()),
        Cell::from(format::next_attempt(row, now_ms)),
        Cell::from(format::span(now_ms - row.created_at_ms)),
        Cell::from(
            row.last_error
                .as_deref()
                .map(|e| crate::format::one_line(e, 200))
                .unwrap_or_default(),
        ),
    ])
}

impl Component for OutboxView {
    fn screen(&self) -> Screen {
        if self.detail.is_some() {
            Screen::Message
        } else {
            Screen::Outbox
        }
    }

    fn update(&mut self, input: Input, ctx: &Context<'_>) -> Option<Action> {
        match input.what {
            Do::Move(step) => self.step(step, ctx),
            Do::Open => return self.open(),
            Do::Back => self.detail = None,
            Do::CycleStatus => return Some(self.cycle_status()),
            Do::ClearFilters if self.status.is_some() => {
                self.set_status(None);
                return Some(Action::Refresh(Some(Note::Cleared(Cleared::Outbox))));
            }
            Do::Retry => {
                let dialog = Dialog::for_retry(self.target(), ctx.now_ms, ctx.read_only);
                return Some(dialog.into());
            }
            Do::RetryAll => return Some(Dialog::for_retry_all(ctx.read_only).into()),
            Do::KeysOnly => {
                if let KeyCode::Char(pressed) = input.code {
                    let inbox = false;
                    return Some(Action::Say(Note::KeysOnly { pressed, inbox }));
                }
            }
            _ => {}
        }
        None
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let Some(message) = &self.detail else {
            return self.draw_list(frame, area, ctx);
        };
        let loading = if message.loading { " (reading…)" } else { "" };
        let name = message
            .row
            .as_ref()
            .map_or_else(String::new, |row| format!(" {}", row.dedup_id));
        let title = format!(" message #{}{name}{loading} — Esc back ", message.id);
        let lines = message.lines(ctx.now_ms, ctx.tz);
        list::draw_pane(frame, area, title, lines, message.scroll);
    }

    fn close_detail(&mut self) {
        self.detail = None;
    }
}
