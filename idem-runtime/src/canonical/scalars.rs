//! The canonical text of numbers and strings, and the order of member names.

use std::cmp::Ordering;

use serde::ser;

use super::{CanonicalError, Feed, R};

/// Writes the string literal of `s`, which is UTF-8 (escaping only concerns ASCII bytes).
pub(super) fn write_escaped<S: Feed>(s: &[u8], sink: &mut S) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    sink.write(b"\"");
    let mut rest = s;
    while let Some(i) = rest
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
    {
        let b = rest[i];
        sink.write(&rest[..i]);
        let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            _ => b"\\u00",
        };
        sink.write(escape);
        if escape.len() == 4 {
            sink.write(&hex);
        }
        rest = &rest[i + 1..];
    }
    sink.write(rest);
    sink.write(b"\"");
}

/// Appends the decimal digits of `n`, after a minus sign when `negative`.
pub(super) fn write_int<S: Feed>(mut n: u128, negative: bool, sink: &mut S) {
    let mut buf = [b'-'; 40];
    let mut i = buf.len();
    loop {
        i -= 1;
        // u64 division is much cheaper than u128's.
        let (rest, digit) = match u64::try_from(n) {
            Ok(small) => (u128::from(small / 10), small % 10),
            Err(_) => (n / 10, (n % 10) as u64),
        };
        buf[i] = b'0' + digit as u8;
        n = rest;
        if n == 0 {
            break;
        }
    }
    sink.write(&buf[i - usize::from(negative)..]);
}

/// Appends `v` in the ECMAScript `Number::toString` form.
pub(super) fn write_f64<S: Feed>(v: f64, sink: &mut S) -> R {
    if !v.is_finite() {
        return Err(CanonicalError::NonFinite(v));
    }
    if v == 0.0 {
        sink.write(b"0"); // -0 too
    } else {
        sink.write(ryu_js::Buffer::new().format_finite(v).as_bytes());
    }
    Ok(())
}

/// The name under which `serde_json::Number` serialises its text when `serde_json`'s
/// `arbitrary_precision` feature is on.
pub(super) const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Appends the JSON number `text` (from `arbitrary_precision`) canonically: an integer digit
/// for digit, anything else through `f64`.
pub(super) fn write_number_text<S: Feed>(text: &[u8], sink: &mut S) -> R {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        sink.write(if digits == b"0" { digits } else { text });
        return Ok(());
    }
    match std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()) {
        Some(v) => write_f64(v, sink),
        None => Err(ser::Error::custom(
            "a serde_json number that is not a number",
        )),
    }
}

/// Compares two UTF-8 strings as sequences of UTF-16 code units (RFC 8785 §3.2.3).
///
/// UTF-8 byte order is code point order, which differs from UTF-16 order only where a
/// supplementary character (lead byte `F0`–`F4`; a surrogate pair `D800`–`DFFF`) meets one
/// of U+E000–U+FFFF (lead `EE`/`EF`). The first differing bytes of two strings with the same
/// prefix are either both continuation bytes (after the same lead byte) or both lead bytes,
/// and only lead bytes need reweighting.
pub(super) fn cmp_utf16(a: &[u8], b: &[u8]) -> Ordering {
    /// Orders lead bytes by the first UTF-16 code unit of their characters.
    fn weight(byte: u8) -> u16 {
        match byte {
            0xf0..=0xf4 => 0xed * 8 + 1 + u16::from(byte - 0xf0),
            _ => u16::from(byte) * 8,
        }
    }
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some(i) => weight(a[i]).cmp(&weight(b[i])),
    }
}
