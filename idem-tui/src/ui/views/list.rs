//! What the views' lists share: a listing read from the database with its selection
//! ([`Listing`]), how far a move goes ([`delta`]), scrolling a detail pane ([`scroll`]), and
//! drawing a table with its selection or what its emptiness means ([`table`],
//! [`draw_table`]), a detail pane ([`draw_pane`]) and a filter in the header
//! ([`filter_span`]).

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState, Wrap};

use crate::ui::keymap::Step;
use crate::ui::note::Failure;

/// Rows as last read, with the selected one.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<T> {
    /// The rows as last read.
    pub rows: Vec<T>,
    /// The selected line.
    pub selected: usize,
    /// Whether a listing arrived (for the filter in force).
    pub loaded: bool,
    /// Why the last listing failed.
    pub error: Option<Failure>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            selected: 0,
            loaded: false,
            error: None,
        }
    }
}

impl<T> Listing<T> {
    /// The selected row.
    #[must_use]
    pub fn selected_row(&self) -> Option<&T> {
        self.rows.get(self.selected)
    }

    /// Moves the selection by `delta` lines, within the rows.
    pub fn move_by(&mut self, delta: isize) {
        let last = self.rows.len().saturating_sub(1);
        self.selected = self.selected.saturating_add_signed(delta).min(last);
    }

    /// A listing arrived: its rows in place of the old ones, the selected row (by `id`)
    /// kept selected; or why it failed.
    pub fn arrived(&mut self, result: Result<Vec<T>, Failure>, id: impl Fn(&T) -> i64) {
        let keep = self.selected_row().map(&id);
        self.loaded = true;
        match result {
            Ok(rows) => {
                self.rows = rows;
                self.error = None;
                if let Some(at) = keep.and_then(|kept| self.rows.iter().position(|r| id(r) == kept))
                {
                    self.selected = at;
                }
                self.selected = self.selected.min(self.rows.len().saturating_sub(1));
            }
            Err(e) => self.error = Some(e),
        }
    }
}

/// How many lines a move of `step` goes in a list whose page is `page_height` lines.
#[must_use]
pub fn delta(step: Step, page_height: usize) -> isize {
    let page = isize::try_from(page_height.max(1)).unwrap_or(10);
    match step {
        Step::Down => 1,
        Step::Up => -1,
        Step::PageDown => page,
        Step::PageUp => -page,
        Step::Top => isize::MIN / 2,
        Step::Bottom => isize::MAX / 2,
    }
}

/// Scrolls a detail pane of `lines` lines, now scrolled down `at`, by `step`: a line, a
/// page of ten, or to an end (its last line: a wrapped line counts once).
pub fn scroll(at: &mut u16, step: Step, lines: usize) {
    let last = u16::try_from(lines.saturating_sub(1)).unwrap_or(u16::MAX);
    *at = match step {
        Step::Down => at.saturating_add(1).min(last),
        Step::Up => at.saturating_sub(1),
        Step::PageDown => at.saturating_add(10).min(last),
        Step::PageUp => at.saturating_sub(10),
        Step::Top => 0,
        Step::Bottom => last,
    };
}

/// A list's table: bordered, titled, its header underlined, the selected row reversed.
pub fn table<'a>(
    header: Row<'a>,
    rows: impl IntoIterator<Item = Row<'a>>,
    widths: impl IntoIterator<Item = Constraint>,
    title: String,
) -> Table<'a> {
    Table::new(rows, widths)
        .header(header.style(Style::new().bold().underlined()))
        .block(Block::bordered().title(title))
        .row_highlight_style(Style::new().reversed())
        .highlight_symbol("▸")
        .column_spacing(1)
}

/// Draws `table` in `area`, scrolled so that line `selected` shows; or, when `empty` says
/// why there are no rows, the table with that under its header.
pub fn draw_table(
    frame: &mut Frame<'_>,
    area: Rect,
    table: Table<'_>,
    selected: usize,
    empty: Option<String>,
) {
    match empty {
        Some(text) => {
            frame.render_widget(table, area);
            let inner = Rect {
                x: area.x + 2,
                y: area.y + 2,
                width: area.width.saturating_sub(4),
                height: 1,
            }
            .intersection(area);
            frame.render_widget(Paragraph::new(text).dim(), inner);
        }
        None => {
            let inner_height = usize::from(area.height.saturating_sub(3)).max(1);
            let offset = selected.saturating_sub(inner_height - 1);
            let mut state = TableState::new()
                .with_offset(offset)
                .with_selected(Some(selected));
            frame.render_stateful_widget(table, area, &mut state);
        }
    }
}

/// Draws a detail pane: its `lines` under `title`, wrapped, scrolled down `scroll` lines.
pub fn draw_pane(
    frame: &mut Frame<'_>,
    area: Rect,
    title: String,
    lines: Vec<Line<'static>>,
    scroll: u16,
) {
    frame.render_widget(
        Paragraph::new(Text::from(lines))
            .block(Block::bordered().title(title))
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        area,
    );
}

/// A column `width` cells wide.
#[must_use]
pub fn length(width: usize) -> Constraint {
    Constraint::Length(u16::try_from(width).unwrap_or(u16::MAX))
}

/// A filter in the header: `name=value `, or `name=* ` when it is not set.
#[must_use]
pub fn filter_span(name: &str, value: Option<&str>) -> Span<'static> {
    match value {
        Some(v) => Span::styled(format!("{name}={v} "), Style::new().yellow()),
        None => Span::styled(format!("{name}=* "), Style::new().dim()),
    }
}
