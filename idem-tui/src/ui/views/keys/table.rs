//! Drawing the key table's view: the table of the loaded keys (its name columns as wide as
//! their names, within the room: [`key_columns`]), a key's detail pane, and the header's
//! parts it owns: the counts by status ([`KeysView::summary`]) and the filters in force
//! ([`KeysView::filter_spans`]).

use idem_store::{KeyRow, KeyStatus, StatusCounts};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::{Cell, Row};

use super::{Column, Detail, Filters, KeysView};
use crate::ui::format::{self, status_style};
use crate::ui::note::plural;
use crate::ui::views::Context;
use crate::ui::views::list::{self, filter_span, length};

/// The widths of the key table's status, age, exp in and resp columns.
const KEY_TABLE_FIXED: [u16; 4] = [10, 6, 7, 5];

/// The least width the key column keeps (or all it needs, if less) while a scope or an
/// operation is too long to show whole.
const KEY_MIN: usize = 15;

/// The widths of the key table's scope, operation and key columns within `available`
/// cells, from the widest cell of each (`wanted`, headers included). A scope and an
/// operation show whole as long as the key keeps [`KEY_MIN`] (or all it needs, if less),
/// with a space after each when there is room for it, and the key takes the rest. When
/// they do not fit, they share what the key leaves: the narrower shows whole if it needs
/// no more than half, the other gets the rest.
#[must_use]
pub fn key_columns(available: usize, [scope, operation, key]: [usize; 3]) -> [usize; 3] {
    let budget = available.saturating_sub(key.min(KEY_MIN));
    let (scope, operation) = if scope + operation <= budget {
        (scope, operation)
    } else {
        let half = budget / 2;
        if scope <= half {
            (scope, budget - scope)
        } else if operation <= half {
            (budget - operation, operation)
        } else {
            (half, budget - half)
        }
    };
    // A space between a name and the next, beside the table's one, when the key can spare
    // it: names that run into each other read as one.
    let spare = budget.saturating_sub(scope + operation);
    let scope = scope + spare.min(1);
    let operation = operation + spare.saturating_sub(1).min(1);
    [
        scope,
        operation,
        available.saturating_sub(scope + operation),
    ]
}

fn response_status(row: &KeyRow) -> String {
    row.response
        .as_ref()
        .map_or_else(|| "-".to_owned(), |r| r.status.to_string())
}

/// The column titles: their digit, their name, the sort's arrow.
fn titles(view: &KeysView) -> Vec<String> {
    Column::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mark = match view.sort {
                Some((column, false)) if column == *c => "↑",
                Some((column, true)) if column == *c => "↓",
                _ => "",
            };
            format!("{}{}{mark}", i + 1, c.title())
        })
        .collect()
}

/// The scope, operation and key columns' widths: as wide as their widest cell (`titles`
/// included), within the room the other columns, the borders, the selection mark and the
/// spaces leave in `width`.
fn name_widths(view: &KeysView, titles: &[String], width: u16) -> [usize; 3] {
    let mut wanted = [0; 3];
    for (i, title) in titles.iter().take(3).enumerate() {
        wanted[i] = title.chars().count();
    }
    for row in view.shown_rows() {
        for (i, text) in [&row.scope, &row.operation, &row.key]
            .into_iter()
            .enumerate()
        {
            wanted[i] = wanted[i].max(text.chars().count());
        }
    }
    let fixed: u16 = KEY_TABLE_FIXED.iter().sum();
    let spacing = u16::try_from(Column::ALL.len() - 1).unwrap_or(u16::MAX);
    let available = width.saturating_sub(2 + 1 + spacing + fixed);
    key_columns(usize::from(available), wanted)
}

/// The table's title: how many keys are loaded, and whether more follow.
fn title(view: &KeysView) -> String {
    let more = if view.loading_more {
        ", loading more…"
    } else if view.next.is_some() {
        ", more below"
    } else {
        ""
    };
    let loaded = view.order.len();
    let keys = plural(u64::try_from(loaded).unwrap_or(u64::MAX), "key", "keys");
    format!(" {loaded} {keys} loaded{more} ")
}

impl KeysView {
    /// Draws the table of the loaded keys.
    pub(super) fn draw_list(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let titles = titles(self);
        let [scope_width, operation_width, key_width] = name_widths(self, &titles, area.width);
        let cut = crate::format::one_line;
        let header = Row::new(titles.into_iter().map(Cell::from));
        let rows = self.shown_rows().map(|row| {
            Row::new(vec![
                Cell::from(cut(&row.scope, scope_width)),
                Cell::from(cut(&row.operation, operation_width)),
                Cell::from(cut(&row.key, key_width)),
                Cell::from(Span::styled(row.status.as_str(), status_style(row.status))),
                Cell::from(format::span(ctx.now_ms - row.created_at_ms)),
                Cell::from(format::expires_in(row, ctx.now_ms)),
                Cell::from(response_status(row)),
            ])
        });
        let widths = [
            length(scope_width),
            length(operation_width),
            // (The key takes what is left, `key_width` as computed.)
            Constraint::Fill(1),
            Constraint::Length(KEY_TABLE_FIXED[0]),
            Constraint::Length(KEY_TABLE_FIXED[1]),
            Constraint::Length(KEY_TABLE_FIXED[2]),
            Constraint::Length(KEY_TABLE_FIXED[3]),
        ];
        let table = list::table(header, rows, widths, title(self));
        let empty = self.order.is_empty().then(|| {
            if ctx.refreshing {
                "loading…"
            } else if self.filters == Filters::default() {
                "no keys"
            } else {
                "no keys match the filters (x clears them)"
            }
            .to_owned()
        });
        list::draw_table(frame, area, table, self.selected, empty);
    }
}

impl Detail {
    /// Draws the pane.
    pub(super) fn draw(&self, frame: &mut Frame<'_>, area: Rect, ctx: &Context<'_>) {
        let loading = if self.loading { " (reading…)" } else { "" };
        let title = format!(" {}{loading} — Esc back ", self.key);
        let lines = self.lines(ctx.now_ms, ctx.tz);
        list::draw_pane(frame, area, title, lines, self.scroll);
    }
}

fn counts_spans(counts: &StatusCounts) -> Vec<Span<'static>> {
    let total = counts.total();
    let mut spans = vec![Span::raw(format!(
        "{total} {} ",
        plural(total, "key", "keys")
    ))];
    for status in KeyStatus::ALL {
        spans.push(Span::raw(" "));
        spans.push(Span::styled(
            format!("{} {}", status, counts.get(status)),
            status_style(status),
        ));
    }
    spans
}

impl KeysView {
    /// The header's counts: the keys by status and the oldest stuck one, once counted.
    #[must_use]
    pub fn summary(&self, now_ms: i64) -> Vec<Span<'static>> {
        let Some(counts) = &self.counts else {
            return vec![Span::raw("counting…")];
        };
        let mut spans = counts_spans(&counts.by_status);
        if let Some(oldest) = counts.oldest_stuck_created_at_ms {
            spans.push(Span::styled(
                format!("  oldest stuck {}", format::relative(oldest, now_ms)),
                Style::new().red(),
            ));
        }
        spans
    }

    /// The header's filters: each filter's value (`*`: none), and the sort.
    #[must_use]
    pub fn filter_spans(&self) -> Vec<Span<'static>> {
        let f = &self.filters;
        let prefix = f.key_prefix.as_deref().map(|p| p.to_owned() + "*");
        let mut spans = vec![
            filter_span("status", f.status.map(KeyStatus::as_str)),
            filter_span("scope", f.scope.as_deref()),
            filter_span("op", f.operation.as_deref()),
            filter_span("key", prefix.as_deref()),
        ];
        if let Some((column, descending)) = self.sort {
            spans.push(Span::styled(
                format!(
                    "sort={}{}",
                    column.title(),
                    if descending { "↓" } else { "↑" }
                ),
                Style::new().cyan(),
            ));
        }
        spans
    }
}
