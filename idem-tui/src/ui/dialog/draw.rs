//! Drawing a dialog: what it acts on, what will change in words ([`Dialog::effect`]; a
//! refusal the store will answer said in [`refusal`]'s words), its fields and its buttons.
//!
//! [`refusal`]: crate::refusal

use idem_store::{KeyRow, NotApplicable, OutboxRow, OutboxStatus, StoredStatus};
use jiff::tz::TimeZone;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::{Dialog, Field, Target};
use crate::message;
use crate::refusal;
use crate::ui::act::ActKind;
use crate::ui::format;

/// A rectangle of at most `width`×`height` in the middle of `area`.
#[must_use]
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// What a retry will change, in words: of `message`, or of every message (`None`).
fn retry_effect(message: Option<&OutboxRow>, tz: &TimeZone) -> Vec<String> {
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
                format::local_time(row.next_attempt_at_ms, tz)
            ),
            format!("attempts: {} (kept)", row.attempts),
        ],
    };
    effect.push("the last error stays until the next attempt's outcome".to_owned());
    effect.push("refused if it was claimed, delivered or fell due meanwhile".to_owned());
    effect
}

/// What `kind` will change of the key `row`, in words (`status`: the response status
/// typed); then the store's refusal ahead, if it will refuse unless forced.
fn key_effect(kind: ActKind, row: &KeyRow, status: &str, tz: &TimeZone) -> Vec<String> {
    let processing = row.status.stored() == StoredStatus::Processing;
    if kind == ActKind::Expire && processing {
        let why = NotApplicable::NotFinal { status: row.status };
        return vec![refusal::not_applicable(&why)];
    }
    let lease = row
        .locked_until_ms
        .map_or_else(|| "none".to_owned(), |l| format::local_time(l, tz));
    let mut effect = match kind {
        ActKind::Expire => vec![
            format!(
                "expires_at: {} → now",
                format::local_time(row.expires_at_ms, tz)
            ),
            format!("status: {} → expired", row.status),
            "retries answer 410 (or run again) until the sweeper deletes it".to_owned(),
        ],
        ActKind::Release => vec![
            format!("attempt: {} → {}", row.attempt, row.attempt + 1),
            format!("locked_until: {lease} → now"),
            format!(
                "the next retry resumes from {}",
                row.recovery_point.as_deref().unwrap_or("the start")
            ),
        ],
        ActKind::Complete | ActKind::Fail => vec![
            format!("status: {} → completed", row.status),
            format!("response: none → {} with the body below", status.trim()),
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
    let hazard = kind.store_action().and_then(|action| action.hazard(row));
    if let Some(hazard) = hazard {
        effect.push(refusal::warning(kind.name(), &hazard));
    }
    effect
}

/// What the dialog acts on: the key or the message as shown, or every message.
fn target_lines(target: &Target, now_ms: i64) -> Vec<Line<'static>> {
    match target {
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
                message::state(row, now_ms),
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
    }
}

impl Dialog {
    /// What the action will change, in words.
    #[must_use]
    pub fn effect(&self, tz: &TimeZone) -> Vec<String> {
        match &self.target {
            Target::Key(row) => key_effect(self.kind, row, &self.status, tz),
            Target::Message(row) => retry_effect(Some(row), tz),
            Target::AllMessages => retry_effect(None, tz),
        }
    }

    /// The fields, `by` the operator, the last error, and the buttons (or how to reach
    /// them).
    fn field_lines(&self, operator: &str) -> Vec<Line<'static>> {
        let input = |name: &str, value: &str, field: Field| {
            let focused = self.focus == field;
            let style = if focused {
                Style::new().reversed()
            } else {
                Style::new()
            };
            Line::from(vec![
                Span::styled(format!("{name:>7}: "), Style::new().bold()),
                Span::styled(format!("{value}{}", if focused { "█" } else { "" }), style),
            ])
        };
        let mut lines = vec![input("reason", &self.reason, Field::Reason)];
        if self.kind.needs_response() {
            lines.push(input("status", &self.status, Field::Status));
            lines.push(input("body", &self.body, Field::Body));
        }
        lines.push(Line::raw(format!("     by: {operator}")));
        if let Some(error) = &self.error {
            lines.push(Line::styled(error.to_string(), Style::new().red().bold()));
        }
        lines.push(if self.focus == Field::Confirm {
            Line::from(vec![
                Span::styled(" y ", Style::new().reversed().bold()),
                Span::raw(format!(" {}   ", self.kind.name())),
                Span::styled(" n ", Style::new().reversed()),
                Span::raw(" cancel"),
            ])
        } else {
            Line::styled(
                "type, Enter/Tab next field, then y confirms; Esc cancels",
                Style::new().dim(),
            )
        });
        lines
    }

    /// Draws the dialog over the screen, as tall as its lines once wrapped (so that the
    /// buttons always show); times in `tz` and relative to `now_ms`, `operator` acting.
    pub fn draw(&self, frame: &mut Frame<'_>, now_ms: i64, tz: &TimeZone, operator: &str) {
        let mut lines = target_lines(&self.target, now_ms);
        lines.extend(
            self.effect(tz)
                .into_iter()
                .map(|l| Line::styled(format!("• {l}"), Style::new().yellow())),
        );
        lines.extend(self.field_lines(operator));
        let title = match self.target {
            Target::Key(_) => format!(" {} this key? ", self.kind.name()),
            Target::Message(_) => " retry this message? ".to_owned(),
            Target::AllMessages => " retry every dead or waiting message? ".to_owned(),
        };
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
}
