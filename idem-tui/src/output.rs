//! Writing results: one JSON document or aligned text, through the one place that writes to
//! stdout, and errors to stderr.

use std::io::Write as _;

use serde_json::{Value, json};

use crate::error::CommandError;

/// What a command produced: the JSON document and the text for people, one of which is
/// printed.
#[derive(Debug)]
pub struct Report {
    /// The `--json` document.
    pub json: Value,
    /// The human-readable text, lines ending in `\n`.
    pub text: String,
}

/// Writes `text` to stdout. A closed pipe (`idem keys list | head`) is not an error.
pub fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Prints the report: its JSON (pretty, one document) or its text.
pub fn print(report: &Report, as_json: bool) {
    if as_json {
        write_stdout(&format!("{}\n", pretty(&report.json)));
    } else {
        write_stdout(&report.text);
    }
}

/// Prints a failure: one line on stderr; with `--json`, also `{"error", "code"}` (and
/// `current`, the key as it is now, when it changed) on stdout.
pub fn print_failure(failure: &CommandError, as_json: bool) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "idem: {}", failure.message);
    if as_json {
        let mut doc = json!({"error": failure.message, "code": failure.code});
        if let (Some(current), Value::Object(fields)) = (&failure.current, &mut doc) {
            fields.insert("current".into(), current.clone());
        }
        write_stdout(&format!("{}\n", pretty(&doc)));
    }
}

/// `value` as indented JSON.
fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// A table of aligned columns, headers in capitals, two spaces between columns.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns aligned to the right (numbers).
    right: Vec<bool>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
            right: vec![false; headers.len()],
        }
    }

    /// Aligns column `index` to the right.
    pub fn right(mut self, index: usize) -> Self {
        if let Some(slot) = self.right.get_mut(index) {
            *slot = true;
        }
        self
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text: a header line, then a line per row.
    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let cell = |row: &[String], i: usize| row.get(i).cloned().unwrap_or_default();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, width) in widths.iter_mut().enumerate() {
                *width = (*width).max(cell(row, i).chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            let mut text = String::new();
            for (i, content) in cells.iter().enumerate().take(columns) {
                let pad = widths[i].saturating_sub(content.chars().count());
                let last = i + 1 == columns;
                if i > 0 {
                    text.push_str("  ");
                }
                if self.right[i] {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(content);
                } else {
                    text.push_str(content);
                    if !last {
                        text.push_str(&" ".repeat(pad));
                    }
                }
            }
            let mut text = text.trim_end().to_owned();
            text.push('\n');
            text
        };
        let mut text = line(self.headers.iter().map(|h| (*h).to_owned()).collect());
        for row in &self.rows {
            text.push_str(&line((0..columns).map(|i| cell(row, i)).collect()));
        }
        text
    }
}

/// Aligned `name: value` lines, names padded to the longest.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(n, _)| n.len() + 1).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(name, value)| {
            let line = format!("{name:width$}  {value}", name = format!("{name}:"));
            format!("{}\n", line.trim_end())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut table = Table::new(&["NAME", "N"]).right(1);
        table.row(vec!["alpha".into(), "1".into()]);
        table.row(vec!["b".into(), "100".into()]);
        assert_eq!(table.render(), "NAME     N\nalpha    1\nb      100\n");
    }
}
