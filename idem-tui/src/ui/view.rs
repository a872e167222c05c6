//! Drawing: [`view`] is a pure function of the [`App`] (its clock included).

use idem_store::{
    InboxStatus, KeyRow, KeyStatus, OutboxCounts, OutboxRow, OutboxStatus, StatusCounts,
    StoredStatus,
};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};

use super::app::{
    ActKind, App, Column, Detail, Dialog, EVENTS, EventDetail, Field, Filters, MESSAGES,
    MessageDetail, Target, View,
};
use super::format::{self, event_style, message_state, message_style, status_style};
use super::keymap;
use super::note::plural;

/// Draws the whole screen.
pub fn view(app: &App, frame: &mut Frame<'_>) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(3),
        Constraint::Length(footer_height(app, frame.area().width)),
    ])
    .areas(frame.area());
    draw_header(app, frame, header);
    match (&app.detail, &app.message, &app.event, app.view) {
        (Some(detail), _, _, _) => draw_detail(app, detail, frame, body),
        (None, Some(message), _, _) => draw_message(app, message, frame, body),
        (None, None, Some(event), _) => draw_event(app, event, frame, body),
        (None, None, None, View::Keys) => draw_keys(app, frame, body),
        (None, None, None, View::Operations) => draw_operations(app, frame, body),
        (None, None, None, View::Outbox) => draw_outbox(app, frame, body),
        (None, None, None, View::Inbox) => draw_inbox(app, frame, body),
    }
    draw_footer(app, frame, footer);
    if let Some(dialog) = &app.dialog {
        draw_dialog(app, dialog, frame);
    }
    if app.help {
        draw_help(frame);
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

fn outbox_counts_spans(counts: &OutboxCounts) -> Vec<Span<'static>> {
    let styled = |text: String, style: Style, n: u64| {
        Span::styled(text, if n > 0 { style } else { Style::new() })
    };
    vec![
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
    ]
}

/// The inbox view's counts: of the events listed (at most [`EVENTS`]), by status.
fn inbox_counts_spans(app: &App) -> Vec<Span<'static>> {
    let inbox = &app.inbox;
    if !inbox.loaded {
        return vec![Span::raw("reading the inbox…")];
    }
    let count = |status: InboxStatus| inbox.rows.iter().filter(|e| e.status == status).count();
    let (unmatched, waiting) = (count(InboxStatus::Unmatched), count(InboxStatus::Waiting));
    vec![
        Span::raw("listed: "),
        Span::styled(
            format!("unmatched {unmatched}"),
            if unmatched > 0 {
                event_style(InboxStatus::Unmatched)
            } else {
                Style::new()
            },
        ),
        Span::raw(format!("  waiting {waiting}")),
        Span::styled("  read-only", Style::new().dim()),
    ]
}

fn draw_header(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let refreshed = match app.refreshed_at_ms {
        Some(at) => format!(
            "refreshed {} ({})",
            format::clock_time(at, &app.tz),
            format::relative(at, app.now_ms)
        ),
        None => "loading…".to_owned(),
    };
    // The database last: a long URL is cut, the rest stays readable.
    let mut first = vec![
        Span::styled(" idem ", Style::new().bold().reversed()),
        Span::raw(" "),
        Span::styled(refreshed, Style::new().dim()),
    ];
    if app.paused {
        first.push(Span::styled(" [paused]", Style::new().yellow().bold()));
    }
    if app.read_only {
        first.push(Span::styled(" [read-only]", Style::new().cyan()));
    }
    first.push(Span::raw("  "));
    first.push(Span::raw(app.database.clone()));
    let mut second = vec![Span::raw(" ")];
    match (&app.counts, &app.outbox_counts) {
        // The inbox view counts the events it lists.
        _ if app.view == View::Inbox => second.extend(inbox_counts_spans(app)),
        // The outbox view counts messages.
        (_, Some(counts)) if app.view == View::Outbox => {
            second.extend(outbox_counts_spans(counts));
            if let Some(oldest) = counts.oldest_pending_ms {
                second.push(Span::styled(
                    format!("  oldest pending {}", format::relative(oldest, app.now_ms)),
                    Style::new().dim(),
                ));
            }
        }
        (_, None) if app.view == View::Outbox => second.push(Span::raw("counting…")),
        (Some(counts), _) => {
            second.extend(counts_spans(&counts.by_status));
            if let Some(oldest) = counts.oldest_stuck_created_at_ms {
                second.push(Span::styled(
                    format!("  oldest stuck {}", format::relative(oldest, app.now_ms)),
                    Style::new().red(),
                ));
            }
        }
        (None, _) => second.push(Span::raw("counting…")),
    }
    let tab = |name: &'static str, on: bool| {
        if on {
            Span::styled(format!(" {name} "), Style::new().reversed().bold())
        } else {
            Span::raw(format!(" {name} "))
        }
    };
    let f = &app.filters;
    let mut third = vec![
        Span::raw(" "),
        tab("Keys", app.view == View::Keys),
        Span::raw("│"),
        tab("Operations", app.view == View::Operations),
        Span::raw("│"),
        tab("Outbox", app.view == View::Outbox),
    ];
    // Dead messages wait for an operator: said whatever the view.
    if let Some(counts) = app.outbox_counts.filter(|c| c.dead > 0) {
        third.push(Span::styled(
            format!("{} dead ", counts.dead),
            Style::new().red().bold(),
        ));
    }
    third.push(Span::raw("│"));
    third.push(tab("Inbox", app.view == View::Inbox));
    third.push(Span::raw("  "));
    let filter = |name: &str, value: Option<&str>| match value {
        Some(v) => Span::styled(format!("{name}={v} "), Style::new().yellow()),
        None => Span::styled(format!("{name}=* "), Style::new().dim()),
    };
    if matches!(app.view, View::Outbox | View::Inbox) {
        third.push(filter(
            "status",
            if app.view == View::Outbox {
                app.outbox.status.map(OutboxStatus::as_str)
            } else {
                app.inbox.status.map(InboxStatus::as_str)
            },
        ));
        frame.render_widget(
            Paragraph::new(vec![
                Line::from(first),
                Line::from(second),
                Line::from(third),
            ]),
            area,
        );
        return;
    }
    third.push(filter("status", f.status.map(KeyStatus::as_str)));
    third.push(filter("scope", f.scope.as_deref()));
    third.push(filter("op", f.operation.as_deref()));
    third.push(filter(
        "key",
        f.key_prefix
            .as_deref()
            .map(|p| p.to_owned() + "*")
            .as_deref(),
    ));
    if let Some((column, descending)) = app.sort {
        third.push(Span::styled(
            format!(
                "sort={}{}",
                column.title(),
                if descending { "↓" } else { "↑" }
            ),
            Style::new().cyan(),
        ));
    }
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(first),
            Line::from(second),
            Line::from(third),
        ]),
        area,
    );
}

fn response_status(row: &KeyRow) -> String {
    row.response
        .as_ref()
        .map_or_else(|| "-".to_owned(), |r| r.status.to_string())
}

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
pub(crate) fn key_columns(available: usize, [scope, operation, key]: [usize; 3]) -> [usize; 3] {
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

fn draw_keys(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let more = if app.loading_more {
        ", loading more…"
    } else if app.next.is_some() {
        ", more below"
    } else {
        ""
    };
    let loaded = app.order.len();
    let keys = plural(u64::try_from(loaded).unwrap_or(u64::MAX), "key", "keys");
    let title = format!(" {loaded} {keys} loaded{more} ");
    let block = Block::bordered().title(title);
    let titles: Vec<String> = Column::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mark = match app.sort {
                Some((column, false)) if column == *c => "↑",
                Some((column, true)) if column == *c => "↓",
                _ => "",
            };
            format!("{}{}{mark}", i + 1, c.title())
        })
        .collect();
    // The scope, operation and key columns as wide as their widest cell, within the room
    // the other columns, the borders, the selection mark and the spaces leave.
    let mut wanted = [0; 3];
    for (i, title) in titles.iter().take(3).enumerate() {
        wanted[i] = title.chars().count();
    }
    for row in app.shown_rows() {
        for (i, text) in [&row.scope, &row.operation, &row.key]
            .into_iter()
            .enumerate()
        {
            wanted[i] = wanted[i].max(text.chars().count());
        }
    }
    let fixed: u16 = KEY_TABLE_FIXED.iter().sum();
    let spacing = u16::try_from(Column::ALL.len() - 1).unwrap_or(u16::MAX);
    let available = area.width.saturating_sub(2 + 1 + spacing + fixed);
    let [scope_width, operation_width, key_width] = key_columns(usize::from(available), wanted);
    let cut = |text: &str, width: usize| crate::format::one_line(text, width);
    let header =
        Row::new(titles.into_iter().map(Cell::from)).style(Style::new().bold().underlined());
    let rows = app.shown_rows().map(|row| {
        Row::new(vec![
            Cell::from(cut(&row.scope, scope_width)),
            Cell::from(cut(&row.operation, operation_width)),
            Cell::from(cut(&row.key, key_width)),
            Cell::from(Span::styled(row.status.as_str(), status_style(row.status))),
            Cell::from(format::span(app.now_ms - row.created_at_ms)),
            Cell::from(format::expires_in(row, app.now_ms)),
            Cell::from(response_status(row)),
        ])
    });
    let length = |width: usize| Constraint::Length(u16::try_from(width).unwrap_or(u16::MAX));
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
    let inner_height = usize::from(area.height.saturating_sub(3)).max(1);
    let offset = app.selected.saturating_sub(inner_height - 1);
    let mut state = TableState::new()
        .with_offset(offset)
        .with_selected((!app.order.is_empty()).then_some(app.selected));
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(Style::new().reversed())
        .highlight_symbol("▸")
        .column_spacing(1);
    if app.order.is_empty() {
        let text = if app.refreshing {
            "loading…"
        } else if app.filters == Filters::default() {
            "no keys"
        } else {
            "no keys match the filters (x clears them)"
        };
        frame.render_widget(table, area);
        let inner = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1,
        }
        .intersection(area);
        frame.render_widget(Paragraph::new(text).dim(), inner);
    } else {
        frame.render_stateful_widget(table, area, &mut state);
    }
}

fn draw_operations(app: &App, frame: &mut Frame<'_>, area: Rect) {
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
    ])
    .style(Style::new().bold().underlined());
    let rows = app.operations.iter().map(|line| {
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
        Row::new(vec![
            Cell::from(line.operation.clone()),
            Cell::from(scope),
            Cell::from(ttl),
            Cell::from(mode),
            Cell::from(c.completed.to_string()),
            Cell::from(c.processing.to_string()),
            Cell::from(Span::styled(
                c.stuck.to_string(),
                if c.stuck > 0 {
                    status_style(KeyStatus::Stuck)
                } else {
                    Style::new()
                },
            )),
            Cell::from(c.expired.to_string()),
            Cell::from(c.total().to_string()),
        ])
    });
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
    let registered = app.operations.iter().any(|l| l.registered.is_some());
    let title = if registered {
        " operations (-: not registered; Enter: their keys) ".to_owned()
    } else {
        " operations with keys (none registered: ttl, scope, mode unknown) ".to_owned()
    };
    let mut state =
        TableState::new().with_selected((!app.operations.is_empty()).then_some(app.op_selected));
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title))
            .row_highlight_style(Style::new().reversed())
            .highlight_symbol("▸")
            .column_spacing(1),
        area,
        &mut state,
    );
}

fn draw_outbox(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let outbox = &app.outbox;
    let filtered = outbox.status.map_or_else(String::new, |s| format!(" {s}"));
    let capped = if outbox.rows.len() >= usize::try_from(MESSAGES).unwrap_or(usize::MAX) {
        format!(", the first {MESSAGES}")
    } else {
        String::new()
    };
    let title = format!(
        " {}{filtered} {} (oldest first{capped}; Enter: one, r: retry) ",
        outbox.rows.len(),
        plural(outbox.rows.len() as u64, "message", "messages")
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
    ])
    .style(Style::new().bold().underlined());
    let rows = outbox.rows.iter().map(|row| {
        Row::new(vec![
            Cell::from(row.id.to_string()),
            Cell::from(row.dedup_id.clone()),
            Cell::from(row.topic.clone()),
            Cell::from(Span::styled(
                row.status.as_str(),
                message_style(row, app.now_ms),
            )),
            Cell::from(row.attempts.to_string()),
            Cell::from(format::next_attempt(row, app.now_ms)),
            Cell::from(format::span(app.now_ms - row.created_at_ms)),
            Cell::from(
                row.last_error
                    .as_deref()
                    .map(|e| crate::format::one_line(e, 200))
                    .unwrap_or_default(),
            ),
        ])
    });
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
    let inner_height = usize::from(area.height.saturating_sub(3)).max(1);
    let offset = outbox.selected.saturating_sub(inner_height - 1);
    let mut state = TableState::new()
        .with_offset(offset)
        .with_selected((!outbox.rows.is_empty()).then_some(outbox.selected));
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(title))
        .row_highlight_style(Style::new().reversed())
        .highlight_symbol("▸")
        .column_spacing(1);
    if outbox.rows.is_empty() {
        let text = match (&outbox.error, outbox.loaded, outbox.status) {
            (Some(e), _, _) => format!("the outbox cannot be read: {e}"),
            (None, false, _) => "loading…".to_owned(),
            (None, true, None) => "no messages".to_owned(),
            (None, true, Some(status)) => format!("no {status} messages (x clears the filter)"),
        };
        frame.render_widget(table, area);
        let inner = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1,
        }
        .intersection(area);
        frame.render_widget(Paragraph::new(text).dim(), inner);
    } else {
        frame.render_stateful_widget(table, area, &mut state);
    }
}

/// The widths of the inbox table's status, age and deliveries columns.
const INBOX_FIXED: [u16; 3] = [9, 6, 4];

/// The widths of the inbox table's event id, source and reason columns within `width`: the
/// event id and the source as wide as their widest cell, up to a third and a fifth of the
/// room, and the reason the rest, so that it is cut (with `…`) only when nothing is left.
fn inbox_columns(inbox: &super::app::Events, width: u16) -> [usize; 3] {
    let fixed: u16 = INBOX_FIXED.iter().sum();
    // The borders, the selection mark and a space between columns.
    let available = usize::from(width.saturating_sub(2 + 1 + 5 + fixed));
    let widest = |cell: fn(&idem_store::InboxEvent) -> &str, title: &str| {
        (inbox.rows.iter())
            .map(|row| cell(row).chars().count())
            .fold(title.chars().count(), usize::max)
    };
    let id = widest(|row| &row.event_id, "event id").min(available / 3);
    let source = widest(|row| &row.source, "source").min(available / 5);
    [id, source, available.saturating_sub(id + source)]
}

fn draw_inbox(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let inbox = &app.inbox;
    let filtered = inbox.status.map_or_else(String::new, |s| format!(" {s}"));
    let capped = if inbox.rows.len() >= usize::try_from(EVENTS).unwrap_or(usize::MAX) {
        format!(", the first {EVENTS}")
    } else {
        String::new()
    };
    let title = format!(
        " {}{filtered} {} (the longest noted first{capped}; Enter: one) ",
        inbox.rows.len(),
        plural(inbox.rows.len() as u64, "event", "events")
    );
    let header = Row::new(["event id", "source", "status", "age", "dlv", "reason"])
        .style(Style::new().bold().underlined());
    let [id_width, source_width, reason_width] = inbox_columns(inbox, area.width);
    let cut = crate::format::one_line;
    let rows = inbox.rows.iter().map(|row| {
        Row::new(vec![
            Cell::from(cut(&row.event_id, id_width)),
            Cell::from(cut(&row.source, source_width)),
            Cell::from(Span::styled(row.status.as_str(), event_style(row.status))),
            Cell::from(format::span(row.age_ms(app.now_ms))),
            Cell::from(row.deliveries.to_string()),
            Cell::from(cut(&row.reason, reason_width)),
        ])
    });
    let length = |width: usize| Constraint::Length(u16::try_from(width).unwrap_or(u16::MAX));
    let widths = [
        length(id_width),
        length(source_width),
        Constraint::Length(INBOX_FIXED[0]),
        Constraint::Length(INBOX_FIXED[1]),
        Constraint::Length(INBOX_FIXED[2]),
        Constraint::Fill(1),
    ];
    let inner_height = usize::from(area.height.saturating_sub(3)).max(1);
    let offset = inbox.selected.saturating_sub(inner_height - 1);
    let mut state = TableState::new()
        .with_offset(offset)
        .with_selected((!inbox.rows.is_empty()).then_some(inbox.selected));
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(title))
        .row_highlight_style(Style::new().reversed())
        .highlight_symbol("▸")
        .column_spacing(1);
    if inbox.rows.is_empty() {
        let text = match (&inbox.error, inbox.loaded, inbox.status) {
            (Some(e), _, _) => format!("the inbox cannot be read: {e}"),
            (None, false, _) => "loading…".to_owned(),
            (None, true, None) => "no events: every event received was applied".to_owned(),
            (None, true, Some(status)) => format!("no {status} events (x clears the filter)"),
        };
        frame.render_widget(table, area);
        let inner = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1,
        }
        .intersection(area);
        frame.render_widget(Paragraph::new(text).dim(), inner);
    } else {
        frame.render_stateful_widget(table, area, &mut state);
    }
}

fn draw_event(app: &App, event: &EventDetail, frame: &mut Frame<'_>, area: Rect) {
    let title = format!(" event {} — Esc back ", event.event_id);
    frame.render_widget(
        Paragraph::new(Text::from(event.lines(app.now_ms, &app.tz)))
            .block(Block::bordered().title(title))
            .wrap(Wrap { trim: false })
            .scroll((event.scroll, 0)),
        area,
    );
}

fn draw_message(app: &App, message: &MessageDetail, frame: &mut Frame<'_>, area: Rect) {
    let loading = if message.loading { " (reading…)" } else { "" };
    let name = message
        .row
        .as_ref()
        .map_or_else(String::new, |row| format!(" {}", row.dedup_id));
    let title = format!(" message #{}{name}{loading} — Esc back ", message.id);
    frame.render_widget(
        Paragraph::new(Text::from(message.lines(app.now_ms, &app.tz)))
            .block(Block::bordered().title(title))
            .wrap(Wrap { trim: false })
            .scroll((message.scroll, 0)),
        area,
    );
}

fn draw_detail(app: &App, detail: &Detail, frame: &mut Frame<'_>, area: Rect) {
    let loading = if detail.loading { " (reading…)" } else { "" };
    let title = format!(" {}{loading} — Esc back ", detail.key);
    frame.render_widget(
        Paragraph::new(Text::from(detail.lines(app.now_ms, &app.tz)))
            .block(Block::bordered().title(title))
            .wrap(Wrap { trim: false })
            .scroll((detail.scroll, 0)),
        area,
    );
}

/// The footer's lines: one, or as many as an error needs (a refusal says why and what to
/// do), up to 6.
fn footer_height(app: &App, width: u16) -> u16 {
    match &app.status {
        Some(status) if status.is_error() && app.prompt.is_none() && width > 0 => {
            let chars = status.text().chars().count();
            // Some slack for the words the wrap moves to the next line.
            let usable = usize::from(width.saturating_sub(8).max(1));
            let lines = chars.div_ceil(usable).clamp(1, 6);
            u16::try_from(lines).unwrap_or(1)
        }
        _ => 1,
    }
}

fn draw_footer(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let line = if let Some(prompt) = &app.prompt {
        Line::from(vec![
            Span::styled("key prefix: ", Style::new().bold()),
            Span::raw(prompt.text.clone()),
            Span::styled("█", Style::new().slow_blink()),
            Span::styled("  Enter applies, Esc cancels", Style::new().dim()),
        ])
    } else if let Some(status) = &app.status {
        Line::styled(
            status.text(),
            if status.is_error() {
                Style::new().red().bold()
            } else {
                Style::new().green()
            },
        )
    } else {
        Line::styled(keymap::footer(app.page()), Style::new().dim())
    };
    frame.render_widget(Paragraph::new(line).wrap(Wrap { trim: false }), area);
}

/// A rectangle of at most `width`×`height` in the middle of `area`.
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// What a retry will change, in words.
fn retry_effect(app: &App, message: Option<&OutboxRow>) -> Vec<String> {
    let Some(row) = message else {
        return vec![
            "every dead message: pending, due now, attempts back to 0".to_owned(),
            "every message waiting for its next attempt: due now, attempts kept".to_owned(),
            "messages in flight, due or delivered are left as they are".to_owned(),
            "each retry is recorded in the audit trail".to_owned(),
        ];
    };
    let mut effect = match row.status {
        OutboxStatus::Dead => vec![
            "status: dead → pending, due now".to_owned(),
            format!(
                "attempts: {} → 0 (the dispatcher's full number again)",
                row.attempts
            ),
        ],
        _ => vec![
            format!(
                "next attempt: {} → now",
                format::local_time(row.next_attempt_at_ms, &app.tz)
            ),
            format!("attempts: {} (kept)", row.attempts),
        ],
    };
    effect.push("the last error stays until the next attempt's outcome".to_owned());
    effect.push("refused if it was claimed, delivered or fell due meanwhile".to_owned());
    effect
}

/// What the action will change, in words.
fn dialog_effect(app: &App, dialog: &Dialog) -> Vec<String> {
    let row = match &dialog.target {
        Target::Key(row) => row,
        Target::Message(row) => return retry_effect(app, Some(row)),
        Target::AllMessages => return retry_effect(app, None),
    };
    let expires = format::local_time(row.expires_at_ms, &app.tz);
    let lease = row
        .locked_until_ms
        .map_or_else(|| "none".to_owned(), |l| format::local_time(l, &app.tz));
    let point = row.recovery_point.as_deref().unwrap_or("the start");
    let processing = row.status.stored() == StoredStatus::Processing;
    let mut effect = match dialog.kind {
        ActKind::Expire if processing => {
            return vec![
                format!(
                    "not applicable: the key is {}, and a key that is not final never expires \
                     (it is resumed, or answered 409 while its lease is live)",
                    row.status
                ),
                "to end it: fail or complete; to let it resume now: release".to_owned(),
            ];
        }
        ActKind::Expire => vec![
            format!("expires_at: {expires} → now"),
            format!("status: {} → expired", row.status),
            "retries answer 410 (or run again) until the sweeper deletes it".to_owned(),
        ],
        ActKind::Release => vec![
            format!("attempt: {} → {}", row.attempt, row.attempt + 1),
            format!("locked_until: {lease} → now"),
            format!("the next retry resumes from {point}"),
        ],
        ActKind::Complete | ActKind::Fail => vec![
            format!("status: {} → completed", row.status),
            format!(
                "response: none → {} with the body below",
                dialog.status.trim()
            ),
            format!(
                "attempt: {} → {}; lease cleared; retries replay it",
                row.attempt,
                row.attempt + 1
            ),
        ],
        ActKind::Delete => vec![
            "the row is deleted (its audit history stays)".to_owned(),
            "the next request with this key runs as a first one".to_owned(),
        ],
        ActKind::Retry | ActKind::RetryAll => Vec::new(),
    };
    let forced_only = |why: String| {
        format!(
            "{why}: the store refuses this unless forced, and forcing is a command-line \
             action (idem keys {} … --force)",
            dialog.kind.name()
        )
    };
    if row.status == KeyStatus::Processing {
        effect.push(forced_only(format!(
            "its lease is live until {lease}: an attempt is running"
        )));
    } else if dialog.kind == ActKind::Delete
        && !processing
        && (row.attempt > 0 || row.recovery_point.is_some())
    {
        effect.push(forced_only(
            "it completed in staged mode: its steps' effects exist, a new execution would run \
             them again"
                .to_owned(),
        ));
    }
    effect
}

fn draw_dialog(app: &App, dialog: &Dialog, frame: &mut Frame<'_>) {
    let mut lines = match &dialog.target {
        Target::Key(row) => vec![
            Line::from(vec![
                Span::raw("key: "),
                Span::styled(
                    format!("{} {} {}", row.scope, row.operation, row.key),
                    Style::new().bold(),
                ),
            ]),
            Line::raw(format!(
                "as shown: {}, attempt {}; refused if it changed since",
                row.status, row.attempt
            )),
        ],
        Target::Message(row) => vec![
            Line::from(vec![
                Span::raw("message: "),
                Span::styled(
                    format!("#{} {} ({})", row.id, row.dedup_id, row.topic),
                    Style::new().bold(),
                ),
            ]),
            Line::raw(format!(
                "as shown: {}, {} attempt{}",
                message_state(row, app.now_ms),
                row.attempts,
                if row.attempts == 1 { "" } else { "s" }
            )),
        ],
        Target::AllMessages => vec![Line::from(vec![
            Span::raw("messages: "),
            Span::styled(
                "every dead one, every one waiting for its next attempt",
                Style::new().bold(),
            ),
        ])],
    };
    lines.extend(
        dialog_effect(app, dialog)
            .into_iter()
            .map(|l| Line::styled(format!("• {l}"), Style::new().yellow())),
    );
    let input = |name: &str, value: &str, field: Field| {
        let focused = dialog.focus == field;
        Line::from(vec![
            Span::styled(format!("{name:>7}: "), Style::new().bold()),
            Span::styled(
                format!("{value}{}", if focused { "█" } else { "" }),
                if focused {
                    Style::new().reversed()
                } else {
                    Style::new()
                },
            ),
        ])
    };
    lines.push(input("reason", &dialog.reason, Field::Reason));
    if dialog.kind.needs_response() {
        lines.push(input("status", &dialog.status, Field::Status));
        lines.push(input("body", &dialog.body, Field::Body));
    }
    lines.push(Line::raw(format!("     by: {}", app.operator)));
    if let Some(error) = &dialog.error {
        lines.push(Line::styled(error.to_string(), Style::new().red().bold()));
    }
    let confirm = if dialog.focus == Field::Confirm {
        Line::from(vec![
            Span::styled(" y ", Style::new().reversed().bold()),
            Span::raw(format!(" {}   ", dialog.kind.name())),
            Span::styled(" n ", Style::new().reversed()),
            Span::raw(" cancel"),
        ])
    } else {
        Line::styled(
            "type, Enter/Tab next field, then y confirms; Esc cancels",
            Style::new().dim(),
        )
    };
    lines.push(confirm);
    let title = match dialog.target {
        Target::Key(_) => format!(" {} this key? ", dialog.kind.name()),
        Target::Message(_) => " retry this message? ".to_owned(),
        Target::AllMessages => " retry every dead or waiting message? ".to_owned(),
    };
    // As tall as its lines once wrapped, so that the confirmation line always shows.
    let inner = usize::from(72.min(frame.area().width).saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
    let height = u16::try_from(rows + 2).unwrap_or(u16::MAX);
    let area = centered(frame.area(), 72, height);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(
                Block::bordered()
                    .title(title)
                    .border_style(Style::new().yellow()),
            )
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// The help: every binding of the [`keymap`], in its order.
fn draw_help(frame: &mut Frame<'_>) {
    let help = keymap::help();
    let width = help
        .iter()
        .map(|(keys, _)| keys.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<Line<'_>> = help
        .into_iter()
        .map(|(keys, what)| {
            Line::from(vec![
                Span::styled(format!("{keys:>width$}  "), Style::new().bold().cyan()),
                Span::raw(what),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "Keys load in database order (scope, operation, key), a page at",
        Style::new().dim(),
    ));
    lines.push(Line::styled(
        "a time as you scroll: a sort orders the keys loaded so far.",
        Style::new().dim(),
    ));
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let area = centered(frame.area(), 76, height);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(" keys — any key closes "))
            .wrap(Wrap { trim: false }),
        area,
    );
}
