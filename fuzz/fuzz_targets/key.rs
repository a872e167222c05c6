//! `IdempotencyKey::parse` on arbitrary header values, in every `KeyFormat`.
//!
//! Invariants:
//! - parsing never panics;
//! - an accepted key, as stored, is 1 to 255 visible ASCII characters (a longer one is its
//!   digest, `sha256:…`), and `IdempotencyKey::new` accepts it as it is;
//! - `Strict` accepts a subset of what `Lenient` accepts, as the same key;
//! - ASCII whitespace around the value changes nothing;
//! - round trip: the key's canonical form, its structured-field string (`"…"` with `\` and
//!   `"` escaped), parses to the same key in every format; so does its bare form in
//!   `Lenient` when it has no quote.

#![no_main]

use idem_runtime::IdempotencyKey;
use idem_runtime::key::{KeyError, KeyFormat, MAX_LEN};
use libfuzzer_sys::fuzz_target;

/// Every format.
const FORMATS: [KeyFormat; 2] = [KeyFormat::Lenient, KeyFormat::Strict];

/// Fails to compile when `KeyFormat` gets a variant that `FORMATS` does not list.
const fn listed(format: KeyFormat) -> bool {
    match format {
        KeyFormat::Lenient | KeyFormat::Strict => true,
    }
}

/// The key as a structured-field string (RFC 8941 §3.3.3).
fn quoted(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn parse(raw: &[u8], format: KeyFormat) -> Result<IdempotencyKey, KeyError> {
    IdempotencyKey::parse(raw, format)
}

fuzz_target!(|raw: &[u8]| {
    let lenient = parse(raw, KeyFormat::Lenient);
    let strict = parse(raw, KeyFormat::Strict);
    if let Ok(key) = &strict {
        assert_eq!(
            lenient.as_ref(),
            Ok(key),
            "Strict accepted what Lenient refused"
        );
    }
    let mut padded = b" \t ".to_vec();
    padded.extend_from_slice(raw);
    padded.extend_from_slice(b"\t  ");
    for (format, parsed) in [(KeyFormat::Lenient, &lenient), (KeyFormat::Strict, &strict)] {
        assert!(listed(format));
        assert_eq!(
            &parse(&padded, format),
            parsed,
            "whitespace changed the result"
        );
        let Ok(key) = parsed else { continue };
        let k = key.as_str();
        assert!((1..=MAX_LEN).contains(&k.len()), "length {}", k.len());
        assert!(k.bytes().all(|b| b.is_ascii_graphic()), "{k:?}");
        assert_eq!(key.to_string(), k);
        assert_eq!(IdempotencyKey::new(k).as_ref(), Ok(key));
        let canonical = quoted(k);
        for other in FORMATS {
            assert_eq!(
                parse(canonical.as_bytes(), other).as_ref(),
                Ok(key),
                "{canonical:?} in {other:?}"
            );
        }
        if !k.contains('"') {
            assert_eq!(parse(k.as_bytes(), KeyFormat::Lenient).as_ref(), Ok(key));
        }
    }
});
