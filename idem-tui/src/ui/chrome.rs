//! Drawing the screen: [`draw`] is a pure function of the [`App`] (its clock included). What
//! surrounds the view shown is drawn here — the header (the refresh, the counts, the tabs,
//! the filters), the footer (the prompt, the status line or the keys' hints) and the help;
//! the view draws itself, and the dialog over it.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::app::{App, View};
use super::dialog::draw::centered;
use super::format;
use super::keymap;

/// Draws the whole screen.
pub fn draw(app: &App, frame: &mut Frame<'_>) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(3),
        Constraint::Length(footer_height(app, frame.area().width)),
    ])
    .areas(frame.area());
    draw_header(app, frame, header);
    app.current().draw(frame, body, &app.context());
    draw_footer(app, frame, footer);
    if let Some(dialog) = &app.dialog {
        dialog.draw(frame, app.now_ms, &app.session.tz, &app.session.operator);
    }
    if app.help {
        draw_help(frame);
    }
}

/// The header's first line: the tool, when what is shown was read, whether the refresh is
/// paused and the tool read-only, and the database (last: a long URL is cut, the rest
/// stays readable).
fn refresh_line(app: &App) -> Line<'static> {
    let refreshed = match app.live.refreshed_at_ms {
        Some(at) => format!(
            "refreshed {} ({})",
            format::clock_time(at, &app.session.tz),
            format::relative(at, app.now_ms)
        ),
        None => "loading…".to_owned(),
    };
    let mut spans = vec![
        Span::styled(" idem ", Style::new().bold().reversed()),
        Span::raw(" "),
        Span::styled(refreshed, Style::new().dim()),
    ];
    if app.live.paused {
        spans.push(Span::styled(" [paused]", Style::new().yellow().bold()));
    }
    if app.session.read_only {
        spans.push(Span::styled(" [read-only]", Style::new().cyan()));
    }
    spans.push(Span::raw("  "));
    spans.push(Span::raw(app.session.database.clone()));
    Line::from(spans)
}

/// The header's second line: the counts of the view shown (the operations view's are the
/// key table's).
fn counts_line(app: &App) -> Line<'static> {
    let mut spans = vec![Span::raw(" ")];
    spans.extend(match app.view {
        View::Keys | View::Operations => app.keys.summary(app.now_ms),
        View::Outbox => app.outbox.summary(app.now_ms),
        View::Inbox => app.inbox.summary(),
    });
    Line::from(spans)
}

/// The header's third line: the tabs (the outbox's says how many messages are dead,
/// whatever the view), then the filters of the view shown.
fn tabs_line(app: &App) -> Line<'static> {
    let tab = |name: &'static str, view: View| {
        if app.view == view {
            Span::styled(format!(" {name} "), Style::new().reversed().bold())
        } else {
            Span::raw(format!(" {name} "))
        }
    };
    let mut spans = vec![
        Span::raw(" "),
        tab("Keys", View::Keys),
        Span::raw("│"),
        tab("Operations", View::Operations),
        Span::raw("│"),
        tab("Outbox", View::Outbox),
    ];
    // Dead messages wait for an operator: said whatever the view.
    if let Some(dead) = app.outbox.dead() {
        spans.push(Span::styled(
            format!("{dead} dead "),
            Style::new().red().bold(),
        ));
    }
    spans.push(Span::raw("│"));
    spans.push(tab("Inbox", View::Inbox));
    spans.push(Span::raw("  "));
    spans.extend(match app.view {
        View::Keys | View::Operations => app.keys.filter_spans(),
        View::Outbox => app.outbox.filter_spans(),
        View::Inbox => app.inbox.filter_spans(),
    });
    Line::from(spans)
}

fn draw_header(app: &App, frame: &mut Frame<'_>, area: Rect) {
    let lines = vec![refresh_line(app), counts_line(app), tabs_line(app)];
    frame.render_widget(Paragraph::new(lines), area);
}

/// The footer's lines: one, or as many as an error needs (a refusal says why and what to
/// do), up to 6.
fn footer_height(app: &App, width: u16) -> u16 {
    match &app.status {
        Some(status) if status.is_error() && app.keys.prompt.is_none() && width > 0 => {
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
    let line = if let Some(prompt) = &app.keys.prompt {
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
