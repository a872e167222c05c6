//! Text for the screen: times (local and relative), stored bodies (JSON highlighted, text,
//! binary as a hex head), fingerprints, the colours of statuses, and when a message is
//! next attempted. Pure functions of their inputs.

use idem_store::{InboxStatus, KeyRow, KeyStatus, OutboxRow, OutboxStatus};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// How many bytes of a binary body the detail pane shows in hexadecimal.
pub const HEX_HEAD: usize = 128;

/// `ms` (milliseconds since the Unix epoch) in `tz`: `2026-12-01 06:35:12.345 UTC`.
#[must_use]
pub fn local_time(ms: i64, tz: &TimeZone) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(ts) => ts
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%d %H:%M:%S%.3f %Z")
            .to_string(),
        Err(_) => format!("{ms} ms (out of range)"),
    }
}

/// `ms` in `tz` as a time of day, `06:35:12`, for the header.
#[must_use]
pub fn clock_time(ms: i64, tz: &TimeZone) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(ts) => ts.to_zoned(tz.clone()).strftime("%H:%M:%S").to_string(),
        Err(_) => "?".to_owned(),
    }
}

/// Spans of time and times relative to now: the tool's one rule ([`crate::format::span`]).
pub use crate::format::{next_attempt, relative, span};

/// The key table's `exp in` cell for `row` at `now_ms`, by the tool's one rule
/// ([`Expiry`]): `22h`, `expired`, or `-` for a key that is not final.
#[must_use]
pub fn expires_in(row: &KeyRow, now_ms: i64) -> String {
    match Expiry::of(row, now_ms) {
        Expiry::NotFinal => "-".to_owned(),
        Expiry::Expired { .. } => "expired".to_owned(),
        Expiry::In { in_ms, .. } => span(in_ms),
    }
}

/// `at_ms` in `tz` and relative to `now_ms`: `2026-12-01 06:35:12.345 UTC (3m ago)`.
#[must_use]
pub fn when(at_ms: i64, now_ms: i64, tz: &TimeZone) -> String {
    format!("{} ({})", local_time(at_ms, tz), relative(at_ms, now_ms))
}

/// Bytes in lowercase hexadecimal, no separators: the tool's one encoder.
pub use crate::format::hex;

/// When a key expires: the tool's one rule.
pub use crate::format::Expiry;

/// What a stored body is, for the detail pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No body.
    Empty,
    /// A JSON document, pretty-printed.
    Json(String),
    /// UTF-8 text that is not JSON.
    Text(String),
    /// Anything else: its size and the hex dump of its first [`HEX_HEAD`] bytes.
    Binary {
        /// The body's size in bytes.
        len: usize,
        /// `offset  hex bytes  ascii` lines.
        head: Vec<String>,
    },
}

/// Classifies and formats `body`.
#[must_use]
pub fn body(body: &[u8]) -> Body {
    if body.is_empty() {
        return Body::Empty;
    }
    if serde_json::from_slice::<serde_json::Value>(body).is_ok()
        && let Ok(text) = std::str::from_utf8(body)
    {
        return Body::Json(pretty_json(text));
    }
    match std::str::from_utf8(body) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t') =>
        {
            Body::Text(text.to_owned())
        }
        _ => Body::Binary {
            len: body.len(),
            head: hex_dump(&body[..body.len().min(HEX_HEAD)]),
        },
    }
}

/// `json` (a valid JSON document) indented two spaces a level, its members in the order
/// written: what was stored, laid out, never re-sorted.
#[must_use]
pub fn pretty_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.extend(chars.next());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// `0000  7b 22 69 64 …  {"id…` lines of 16 bytes.
fn hex_dump(bytes: &[u8]) -> Vec<String> {
    bytes
        .chunks(16)
        .enumerate()
        .map(|(i, chunk)| {
            let hexes: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            let ascii: String = chunk
                .iter()
                .map(|&b| {
                    if b.is_ascii_graphic() || b == b' ' {
                        char::from(b)
                    } else {
                        '.'
                    }
                })
                .collect();
            format!("{:04x}  {:<47}  {ascii}", i * 16, hexes.join(" "))
        })
        .collect()
}

/// Pretty-printed JSON as lines with keys, strings, numbers and literals in colour.
#[must_use]
pub fn highlight_json(pretty: &str) -> Vec<Line<'static>> {
    pretty.lines().map(highlight_json_line).collect()
}

/// One line of pretty-printed JSON, highlighted.
fn highlight_json_line(line: &str) -> Line<'static> {
    let key = Style::new().fg(Color::Cyan);
    let string = Style::new().fg(Color::Green);
    let number = Style::new().fg(Color::Magenta);
    let literal = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    let mut spans = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut plain = String::new();
    let flush = |plain: &mut String, spans: &mut Vec<Span<'static>>| {
        if !plain.is_empty() {
            spans.push(Span::raw(std::mem::take(plain)));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            flush(&mut plain, &mut spans);
            let start = i;
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => i += 2,
                    '"' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            let end = i.min(chars.len());
            let text: String = chars[start..end].iter().collect();
            let is_key = chars[end..].iter().find(|c| !c.is_whitespace()) == Some(&':');
            spans.push(Span::styled(text, if is_key { key } else { string }));
        } else if c == '-' || c.is_ascii_digit() {
            flush(&mut plain, &mut spans);
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || matches!(chars[i], '-' | '+' | '.' | 'e' | 'E'))
            {
                i += 1;
            }
            spans.push(Span::styled(
                chars[start..i].iter().collect::<String>(),
                number,
            ));
        } else if c.is_ascii_alphabetic() {
            flush(&mut plain, &mut spans);
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphabetic() {
                i += 1;
            }
            spans.push(Span::styled(
                chars[start..i].iter().collect::<String>(),
                literal,
            ));
        } else {
            plain.push(c);
            i += 1;
        }
    }
    flush(&mut plain, &mut spans);
    Line::from(spans)
}

/// The colour of a status.
#[must_use]
pub fn status_style(status: KeyStatus) -> Style {
    match status {
        KeyStatus::Completed => Style::new().fg(Color::Green),
        KeyStatus::Processing => Style::new().fg(Color::Yellow),
        KeyStatus::Stuck => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        KeyStatus::Expired => Style::new().fg(Color::DarkGray),
    }
}

/// The colour of an inbox event's status: unmatched and unparseable red (an operator settles
/// it), waiting yellow.
#[must_use]
pub fn event_style(status: InboxStatus) -> Style {
    match status {
        InboxStatus::Unmatched | InboxStatus::Unparseable => {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        }
        InboxStatus::Waiting => Style::new().fg(Color::Yellow),
    }
}

/// The colour of a message's status at `now_ms`: dead red, in flight cyan, pending yellow,
/// delivered green.
#[must_use]
pub fn message_style(row: &OutboxRow, now_ms: i64) -> Style {
    match row.status {
        OutboxStatus::Dead => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        OutboxStatus::Pending if row.in_flight(now_ms) => Style::new().fg(Color::Cyan),
        OutboxStatus::Pending => Style::new().fg(Color::Yellow),
        OutboxStatus::Delivered => Style::new().fg(Color::Green),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_times_in_a_zone() {
        assert_eq!(
            local_time(1_800_000_000_123, &TimeZone::UTC),
            "2027-01-15 08:00:00.123 UTC"
        );
        assert!(local_time(i64::MAX, &TimeZone::UTC).contains("out of range"));
    }

    #[test]
    fn bodies_are_classified() {
        assert_eq!(body(b""), Body::Empty);
        assert_eq!(body(br#"{"a":1}"#), Body::Json("{\n  \"a\": 1\n}".into()));
        // As stored: its members in their order, never re-sorted.
        assert_eq!(
            body(br#"{"z": 1, "a": {"y": [1, {}], "b": "x,\"}"}, "e": []}"#),
            Body::Json(
                "{\n  \"z\": 1,\n  \"a\": {\n    \"y\": [\n      1,\n      {}\n    ],\n    \
                 \"b\": \"x,\\\"}\"\n  },\n  \"e\": []\n}"
                    .into()
            )
        );
        assert_eq!(body(b"plain text"), Body::Text("plain text".into()));
        match body(&[0, 159, 146, 150, b'a']) {
            Body::Binary { len, head } => {
                assert_eq!(len, 5);
                assert_eq!(head.len(), 1);
                assert!(head[0].starts_with("0000  00 9f 92 96 61"), "{}", head[0]);
                assert!(head[0].ends_with("....a"), "{}", head[0]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_highlighting_keeps_the_text() {
        let pretty = "{\n  \"id\": 7,\n  \"ok\": true,\n  \"name\": \"a \\\" b\"\n}";
        let lines = highlight_json(pretty);
        let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
        assert_eq!(text.join("\n"), pretty);
        assert_eq!(lines[1].spans[1].style.fg, Some(Color::Cyan));
        assert_eq!(lines[1].spans[3].style.fg, Some(Color::Magenta));
    }
}
