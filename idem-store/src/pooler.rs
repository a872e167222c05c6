//! Behind a transaction pooler: how idem's statements reach PostgreSQL when its connections
//! go through PgBouncer in `pool_mode = transaction` (or a hosted pooler that behaves like it).
//!
//! Such a pooler lends a server connection to a client for one transaction, or for one
//! statement outside a transaction, and then to another client. Two things do not survive
//! that:
//!
//! - **Prepared statements.** sqlx prepares every `sqlx::query*` statement under a name
//!   (`sqlx_s_1`, …) it keeps per client connection; on a server connection another client
//!   named its own the same way, and the pooler (PgBouncer before 1.21, or with
//!   `max_prepared_statements = 0`) does not track them: "prepared statement `sqlx_s_1`
//!   already exists". Even sqlx's unnamed statements are parsed and bound in two exchanges,
//!   which outside a transaction may reach two server connections.
//! - **Session state**: settings (`SET`), session advisory locks, `LISTEN`.
//!
//! Once [`behind_transaction_pooler`] is called, idem's statements on PostgreSQL go as one
//! simple query each, their parameters written in as literals (as in [the record and its
//! commit](crate#postgresql-the-record-and-its-commit-in-one-round-trip)): one round trip per
//! statement, as a cached prepared statement takes, but the server parses and plans each one.
//! idem keeps no session state on PostgreSQL but staged mode's attempt holds (session
//! advisory locks, which the runtime's switch turns off): its timeouts are `SET LOCAL`, its
//! key locks transaction-scoped, its [migrations](crate#migrations) fit a pooler anyway. The
//! runtime's `Config::transaction_pooler` calls it, and says what else changes.
//!
//! A tool of your own on the store (as the `idem` operator tool does) calls
//! [`behind_transaction_pooler`] before its first statement and opens its PostgreSQL pool
//! with `PgConnectOptions::extra_float_digits(None)` and no `options`: PgBouncer refuses
//! both startup parameters unless listed in its `ignore_startup_parameters`.
//!
//! The switch is for the whole process and one-way: literal statements are right on a direct
//! connection too (a little slower), prepared ones are not behind a pooler. A mode carried by
//! every store handle instead would thread a flag through every signature of the store for a
//! setting a process has once.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sql::Arg;

static BEHIND: AtomicBool = AtomicBool::new(false);

/// From now on, in this process, idem sends its statements as a transaction pooler needs
/// them (see the [module](self)). Idempotent; there is no way back.
///
/// ```
/// idem_store::pooler::behind_transaction_pooler();
/// assert!(idem_store::pooler::is_behind_transaction_pooler());
/// ```
pub fn behind_transaction_pooler() {
    BEHIND.store(true, Ordering::Relaxed);
}

/// Whether [`behind_transaction_pooler`] was called in this process.
#[must_use]
pub fn is_behind_transaction_pooler() -> bool {
    BEHIND.load(Ordering::Relaxed)
}

/// `sql` with each `$n` (`1 ≤ n ≤ count`) replaced by what `param(n - 1, out)` writes, onto
/// `out`; other text, a `$` with no number or one past `count` included, is kept. Parameters
/// never stand inside the statements' string literals, which hold no `$`.
pub(crate) fn each_param(
    out: &mut String,
    sql: &str,
    count: usize,
    mut param: impl FnMut(usize, &mut String),
) {
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        let digits = rest[at + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        out.push_str(&rest[..at]);
        match rest[at + 1..at + 1 + digits].parse::<usize>() {
            Ok(n) if (1..=count).contains(&n) => param(n - 1, out),
            _ => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
}

/// PostgreSQL: `sql` with its parameters written as literals of the types sqlx would have
/// bound them as (`text`, `int8`, `int4`, `bytea`, `bool`), each in parentheses.
pub(crate) fn inline(sql: &str, args: &[Arg<'_>]) -> String {
    let mut out = String::new();
    inline_into(&mut out, sql, args);
    out
}

/// [`inline`], onto `out`, which is grown once to the statement's size.
pub(crate) fn inline_into(out: &mut String, sql: &str, args: &[Arg<'_>]) {
    let literals: usize = (args.iter())
        .map(|arg| match arg {
            Arg::Text(text) | Arg::OptText(Some(text)) => 4 * text.len() + 12,
            Arg::Bytes(bytes) | Arg::OptBytes(Some(bytes)) => 2 * bytes.len() + 16,
            _ => 32,
        })
        .sum();
    out.reserve(sql.len() + literals);
    each_param(out, sql, args.len(), |i, out| {
        out.push('(');
        match args[i] {
            Arg::Text(text) | Arg::OptText(Some(text)) => {
                push_text(out, text);
                out.push_str("::text");
            }
            Arg::OptText(None) => out.push_str("NULL::text"),
            Arg::Int(n) | Arg::OptInt(Some(n)) => {
                let _ = write!(out, "({n})::int8");
            }
            Arg::OptInt(None) => out.push_str("NULL::int8"),
            Arg::Int32(n) => {
                let _ = write!(out, "({n})::int4");
            }
            Arg::Bytes(bytes) | Arg::OptBytes(Some(bytes)) => push_bytes(out, bytes),
            Arg::OptBytes(None) => out.push_str("NULL::bytea"),
            Arg::Bool(flag) => out.push_str(if flag { "true" } else { "false" }),
        }
        out.push(')');
    });
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A PostgreSQL `bytea` literal, `E'\\x<hex>'::bytea`: the server parses the hexadecimal in
/// `bytea`'s input.
pub(crate) fn push_bytes(sql: &mut String, bytes: &[u8]) {
    sql.reserve(2 * bytes.len() + 16);
    sql.push_str(r"E'\\x");
    push_hex::<false>(sql, bytes);
    sql.push_str("'::bytea");
}

/// A PostgreSQL `text` literal with every byte as an escape, `E'\x74\x65…'`: the lexer makes
/// it the string.
pub(crate) fn push_text(sql: &mut String, text: &str) {
    sql.reserve(4 * text.len() + 3);
    sql.push_str("E'");
    push_hex::<true>(sql, text.as_bytes());
    sql.push('\'');
}

/// Writes each byte of `bytes` as two hexadecimal digits, after `\x` when `ESCAPED`: through
/// a buffer on the stack, so that a key row's literals (the merged insert of every first
/// execution writes them) cost a few instructions a byte, not a call each.
fn push_hex<const ESCAPED: bool>(sql: &mut String, bytes: &[u8]) {
    let width = if ESCAPED { 4 } else { 2 };
    let mut buf = [0u8; 512];
    for chunk in bytes.chunks(buf.len() / width) {
        let mut at = 0;
        for &b in chunk {
            if ESCAPED {
                buf[at] = b'\\';
                buf[at + 1] = b'x';
                at += 2;
            }
            buf[at] = HEX[usize::from(b >> 4)];
            buf[at + 1] = HEX[usize::from(b & 0xf)];
            at += 2;
        }
        // ASCII only: always UTF-8.
        sql.push_str(std::str::from_utf8(&buf[..at]).unwrap_or_default());
    }
}

// What `each_param` keeps never shows in idem's statements (`tests/pooler.rs` checks the rest).
#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::each_param;

    #[test]
    fn only_numbered_parameters_are_replaced() {
        let mut out = String::new();
        each_param(&mut out, "a $10 $1 $ $x $2", 2, |i, out| {
            let _ = write!(out, "<{i}>");
        });
        assert_eq!(out, "a $10 <0> $ $x <1>");
    }
}
