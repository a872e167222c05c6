//! The operations view: every registered operation and every operation with keys, with
//! its counts by status (and its ttl, scope and mode when registered); `Enter` lists the
//! operation's keys. Its filter keys (`s`, `x`) are the key table's.

use idem_store::{KeyStatus, OperationInfo};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::{Cell, Row, TableState};

use super::list::{self, delta};
use super::{Action, Component, Context, Input};
use crate::ui::act::ActKind;
use crate::ui::dialog::Dialog;
use crate::ui::format::{self, status_style};
use crate::ui::keymap::{Do, Screen};

/// The operations view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationsView {
    /// The operations, as last counted.
    pub lines: Vec<OperationInfo>,
    /// The selected line.
    pub selected: usize,
}

impl OperationsView {
    /// The operations counted: in place of the old ones, the selection within them.
    pub fn counted(&mut self, lines: Vec<OperationInfo>) {
        self.lines = lines;
        self.selected = self.selected.min(self.lines.len().saturating_sub(1));
    }
}

/// A line's row: the operation, its registration's scope, ttl and mode (`-`: not
/// registered), and its counts.
fn row(line: &OperationInfo) -> Row<'static> {
    let (scope, ttl, mode) = match &line.registered {
        Some(r) => (
            r.scope.to_string(),
            format::span(r.ttl_ms),
            match r.lease_ms {
                Some(lease) => format!("{} ({})", r.mode, format::span(lease)),
                None => r.mode.to_string(),
            },
        ),
        None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
    };
    let c = &line.counts;
    let stuck = if c.stuck > 0 {
        status_style(KeyStatus::Stuck)
    } else {
        Style::new()
    };
    Row::new(vec![
        Cell::from(line.operation.clone()),
        Cell::from(scope),
        Cell::from(ttl),
        Cell::from(mode),
        Cell::from(c.completed.to_string()),
        Cell::from(c.processing.to_string()),
        Cell::from(Span::styled(c.stuck.to_string(), stuck)),
        Cell::from(c.expired.to_string()),
        Cell::from(c.total().to_string()),
    ])
}

impl Component for OperationsView {
    fn screen(&self) -> Screen {
        Screen::Operations
    }

    fn update(&mut self, input: Input, ctx: &Context<'_>) -> Option<Action> {
        // No key is selected here: the actions on keys say so.
        if let Some(kind) = ActKind::on_keys(input.what) {
            return Some(Dialog::for_key(kind, None, ctx.read_only).into());
        }
        match input.what {
            Do::Move(step) => {
                let last = self.lines.len().saturating_sub(1);
                let moved = self
                    .selected
                    .saturating_add_signed(delta(step, ctx.page_height));
                self.selected = moved.min(last);
                None
            }
            Do::Open => {
                let line = self.lines.get(self.selected)?;
                Some(Action::KeysOf(line.operation.clone()))
            }
            _ => None,
        }
    }

    fn draw(&self, frame: &mut Frame<'_>, area: Rect, _ctx: &Context<'_>) {
        let header = Row::new([
            "operation",
            "scope",
            "ttl",
            "mode",
            "compl",
            "proc",
            "stuck",
            "expd",
            "total",
        ]);
        let widths = [
            Constraint::Fill(1),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(12),
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(6),
        ];
        let registered = self.lines.iter().any(|l| l.registered.is_some());
        let title = if registered {
            " operations (-: not registered; Enter: their keys) "
        } else {
            " operations with keys (none registered: ttl, scope, mode unknown) "
        };
        let table = list::table(header, self.lines.iter().map(row), widths, title.to_owned());
        let mut state =
            TableState::new().with_selected((!self.lines.is_empty()).then_some(self.selected));
        frame.render_stateful_widget(table, area, &mut state);
    }

    fn close_detail(&mut self) {}
}
