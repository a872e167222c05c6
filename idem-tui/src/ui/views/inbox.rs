//! The inbox view: the incoming events a receiver could not apply, the longest noted first,
//! filtered by status, and an event's detail pane. Read-only: no action applies to them.

use idem_store::{InboxEvent, InboxStatus};
use jiff::tz::TimeZone;
use ratatui::Frame;
use ratatui::crossterm::event::KeyCode;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row};

use super::list::{self, Listing, delta, filter_span, length};
use super::{Action, Component, Context, Input};
use crate::ui::detail;
use crate::ui::format::{self, event_style};
use crate::ui::keymap::{Do, Screen};
use crate::ui::note::{Cleared, Failure, FilterSet, Note, Read, plural};
use crate::ui::work::InboxQuery;

/// The most events the inbox view reads (the store lists them the longest noted first,
/// without pages).
pub const EVENTS: u32 = 500;

/// The widths of the inbox table's status, age and deliveries columns.
const INBOX_FIXED: [u16; 3] = [9, 6, 4];

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

/// The inbox view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InboxView {
    /// The events as last read, the longest noted first (at most [`EVENTS`]).
    pub list: Listing<InboxEvent>,
    /// Only events in this status.
    pub status: Option<InboxStatus>,
    /// The detail pane of an event, while open.
    pub detail: Option<EventDetail>,
}

impl InboxView {
    /// The listing to read: its filter and its size.
    #[must_use]
    pub fn query(&self) -> InboxQuery {
        InboxQuery {
            status: self.status,
            limit: EVENTS,
        }
    }

    /// A listing arrived: shown if it is for the filter in force, keeping the selected
    /// event.
    pub fn listed(&mut self, query: InboxQuery, result: Result<Vec<InboxEvent>, Failure>) {
        if query.status == self.status {
            self.list.arrived(result, |row| row.id);
        }
    }

    /// A read of the events of `event_id` arrived: the open detail's row, if it is one of
    /// them (`None`: it left the inbox).
    pub fn event_loaded(
        &mut self,
        event_id: &str,
        result: Result<Vec<InboxEvent>, Failure>,
    ) -> Option<Note> {
        let detail = self.detail.as_mut().filter(|d| d.event_id == event_id)?;
        match result {
            Ok(rows) => {
                detail.row = rows.into_iter().find(|row| row.id == detail.id);
                None
            }
            Err(e) => Some(Note::ReadFailed(Read::Event(event_id.to_owned()), e)),
        }
    }

    /// Shows only events in `status` (`None`: every event), from a new listing.
    fn set_status(&mut self, status: Option<InboxStatus>) {
        self.list = Listing::default();
        self.status = status;
    }

    /// The next status filter: waiting, unmatched, then none.
    fn cycle_status(&mut self) -> Action {
        let status = match self.status {
            None => Some(InboxStatus::Waiting),
            Some(InboxStatus::Waiting) => Some(InboxStatus::Unmatched),
            // Unparseable events are shown with every status.
            Some(InboxStatus::Unmatched | InboxStatus::Unparseable) => None,
        };
        self.set_status(status);
        Action::Refresh(Some(Note::Filter(FilterSet::Inbox(status))))
    }

    /// Opens the selected event's detail, as listed: the next refresh reads it again.
    fn open(&mut self) {
        if let Some(row) = self.list.selected_row() {
            self.detail = Some(EventDetail {
                id: row.id,
                event_id: row.event_id.clone(),
                row: Some(row.clone()),
                scroll: 0,
            });
        }
    }

    /// The header's counts: of the events listed (at most [`EVENTS`]), by status.
    #[must_use]
    pub fn summary(&self) -> Vec<Span<'static>> {
        if !self.list.loaded {
            return vec![Span::raw("reading the inbox…")];
        }
        let rows = &self.list.rows;
        let count = |status: InboxStatus| rows.iter().filter(|e| e.status == status).count();
        let (unmatched, waiting) = (count(InboxStatus::Unmatched), count(InboxStatus::Waiting));
        let style = if unmatched > 0 {
            event_style(InboxStatus::Unmatched)
        } else {
            Style::new()
        };
        vec![
            Span::raw("listed: "),
            Span::styled(format!("unmatched {unmatched}"), style),
            Span::raw(format!("  waiting {waiting}")),
            Span::styled("  read-only", Style::new().dim()),
        ]
    }

    /// The header's filter: the status.
    #[must_use]
    pub fn filter_spans(&self) -> Vec<Span<'static>> {
        vec![filter_span("status", self.status.map(InboxStatus::as_str))]
    }

    /// The widths of the table's event id, source and reason columns within `width`: the
    /// event id and the source as wide as their widest cell, up to a third and a fifth of
    /// the room, and the reason the rest, so that it is cut (with `…`) only when nothing is
    /// left.
    fn columns(&self, width: u16) -> [usize; 3] {
        let fixed: u16 = INBOX_FIXED.iter().sum();
        // The borders, the selection mark and a space between columns.
        let available = usize::from(width.saturating_sub(2 + 1 + 5 + fixed));
        let widest = |cell: fn(&InboxEvent) -> &str, title: &str| {
            (self.list.rows.iter())
                .map(|row| cell(row).chars().count())
                .fold(title.chars().count(), usize::max)
        };
        let id = widest(|row| &row.event_id, "event id").min(available / 3);
        let source = widest(|row| &row.source, "source").min(available / 5);
        [id, source, available.saturating_sub(id + source)]
    }

    fn draw_list(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let rows = &self.list.rows;
        let filtered = self.status.map_or_else(String::new, |s| format!(" {s}"));
        let capped = if rows.len() >= usize::try_from(EVENTS).unwrap_or(usize::MAX) {
            format!(", the first {EVENTS}")
        } else {
            String::new()
        };
        let title = format!(
            " {}{filtered} {} (the longest noted first{capped}; Enter: one) ",
            rows.len(),
            plural(rows.len() as u64, "event", "events")
        );
        let header = Row::new(["event id", "source", "status", "age", "dlv", "reason"]);
        let [id_width, source_width, reason_width] = self.columns(area.width);
        let cut = crate::format::one_line;
        let cells = rows.iter().map(|row| {
            Row::new(vec![
                Cell::from(cut(&row.event_id, id_width)),
                Cell::from(cut(&row.source, source_width)),
                Cell::from(Span::styled(row.status.as_str(), event_style(row.status))),
                Cell::from(format::span(row.age_ms(ctx.now_ms))),
                Cell::from(row.deliveries.to_string()),
                Cell::from(cut(&row.reason, reason_width)),
            ])
        });
        let widths = [
            length(id_width),
            length(source_width),
            Constraint::Length(INBOX_FIXED[0]),
            Constraint::Length(INBOX_FIXED[1]),
            Constraint::Length(INBOX_FIXED[2]),
            Constraint::Fill(1),
        ];
        let table = list::table(header, cells, widths, title);
        let empty =
            rows.is_empty()
                .then(|| match (&self.list.error, self.list.loaded, self.status) {
                    (Some(e), _, _) => format!("the inbox cannot be read: {e}"),
                    (None, false, _) => "loading…".to_owned(),
                    (None, true, None) => "no events: every event received was applied".to_owned(),
                    (None, true, Some(status)) => {
                        format!("no {status} events (x clears the filter)")
                    }
                });
        list::draw_table(frame, area, table, self.list.selected, empty);
    }
}

impl Component for InboxView {
    fn screen(&self) -> Screen {
        if self.detail.is_some() {
            Screen::Event
        } else {
            Screen::Inbox
        }
    }

    fn update(&mut self, input: Input, ctx: &Context<'_>) -> Option<Action> {
        match input.what {
            Do::Move(step) => match &mut self.detail {
                Some(detail) => {
                    let lines = detail.lines(ctx.now_ms, ctx.tz).len();
                    list::scroll(&mut detail.scroll, step, lines);
                }
                None => self.list.move_by(delta(step, ctx.page_height)),
            },
            Do::Open => self.open(),
            Do::Back => self.detail = None,
            Do::CycleStatus => return Some(self.cycle_status()),
            Do::ClearFilters if self.status.is_some() => {
                self.set_status(None);
                return Some(Action::Refresh(Some(Note::Cleared(Cleared::Inbox))));
            }
            Do::KeysOnly => {
                if let KeyCode::Char(pressed) = input.code {
                    let inbox = true;
                    return Some(Action::Say(Note::KeysOnly { pressed, inbox }));
                }
            }
            _ => {}
        }
        None
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let Some(event) = &self.detail else {
            return self.draw_list(frame, area, ctx);
        };
        let title = format!(" event {} — Esc back ", event.event_id);
        let lines = event.lines(ctx.now_ms, ctx.tz);
        list::draw_pane(frame, area, title, lines, event.scroll);
    }

    fn close_detail(&mut self) {
        self.detail = None;
    }
}
