//! What a `422 invalid-body` says: where the body went wrong and what was expected there,
//! never what was sent.
//!
//! serde's messages quote the value they refused (`invalid type: string "4111111111111111",
//! expected i32`) and the member names they did not know (`unknown field `…``): both are the
//! client's, and an answer may be logged, cached or shown where the request's values must
//! not be. The detail keeps serde's account of the place — line and column — and of what
//! the type expected, and leaves the rest out:
//!
//! | serde says | the detail says |
//! |---|---|
//! | ``invalid type: string "4111…", expected i32`` | `invalid type, expected i32` |
//! | ``invalid value: integer `7`, expected …`` | `invalid value, expected …` |
//! | `invalid length 3, expected …` | `invalid length, expected …` |
//! | ``unknown variant `x`, expected one of …`` | `unknown variant, expected one of …` |
//! | ``unknown field `x`, expected one of …`` | `unknown field, expected one of …` |
//! | ``missing field `amount` `` / ``duplicate field `amount` `` | as it is: the name is the type's |
//! | `data did not match any variant of untagged enum …` | as it is: the name is the type's |
//! | anything else (a `Deserialize` implementation's own words) | `invalid value` |
//!
//! each followed by ` at line L column C`. `validator`'s errors are written as the field's
//! path and the rule's code (or the message the application gave it), without the `params`
//! it attaches — among which the value itself.

use http::StatusCode;

use crate::problem::Problem;

/// `422 urn:idem:problem:invalid-body` with `detail`, which holds no value of the request.
pub(super) fn invalid_body(detail: String) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:invalid-body",
        "invalid request body",
    )
    .with_detail(detail)
}

/// The detail of a body of the wrong shape (a serde_json error of category `Data`): what was
/// expected, and where.
pub(super) fn shape_detail(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let at = format!(" at line {} column {}", error.line(), error.column());
    let message = text.strip_suffix(&at).unwrap_or(&text);
    let what = without_values(message);
    if error.line() == 0 {
        what
    } else {
        format!("{what}{at}")
    }
}

/// serde's `message` with the request's values and member names left out (see the
/// [module](self)).
fn without_values(message: &str) -> String {
    const KEPT_AS_THEY_ARE: [&str; 3] = [
        "missing field `",
        "duplicate field `",
        "data did not match any variant of untagged enum ",
    ];
    const NAMED_BY_THE_CLIENT: [(&str, &str); 5] = [
        ("invalid type: ", "invalid type"),
        ("invalid value: ", "invalid value"),
        ("invalid length ", "invalid length"),
        ("unknown variant `", "unknown variant"),
        ("unknown field `", "unknown field"),
    ];
    if KEPT_AS_THEY_ARE.iter().any(|p| message.starts_with(p)) {
        return message.to_owned();
    }
    for (prefix, said) in NAMED_BY_THE_CLIENT {
        if message.starts_with(prefix) {
            return format!("{said}, {}", expected(message));
        }
    }
    "invalid value".to_owned()
}

/// What serde's `message` says was expected: the text after the last `, expected ` (the
/// client's value comes before it, and may hold those words too), or that there was nothing
/// to expect.
fn expected(message: &str) -> &str {
    for none in ["there are no fields", "there are no variants"] {
        if message.ends_with(&format!(", {none}")) {
            return none;
        }
    }
    message
        .rfind(", expected ")
        .map_or("expected another value", |at| &message[at + 2..])
}

/// The detail of `validator`'s errors: each field's path and its rules' codes (or the
/// messages the application gave them), never their params (which hold the value).
#[cfg(feature = "validator")]
pub(super) fn validator_detail(errors: &validator::ValidationErrors) -> String {
    let mut lines = Vec::new();
    validator_lines(errors, "", &mut lines);
    lines.sort();
    lines.join("\n")
}

#[cfg(feature = "validator")]
fn validator_lines(errors: &validator::ValidationErrors, path: &str, out: &mut Vec<String>) {
    use validator::ValidationErrorsKind as Kind;
    for (field, kind) in errors.errors() {
        let at = if path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        };
        match kind {
            Kind::Field(list) => {
                for error in list {
                    let said = error.message.as_deref().unwrap_or(&error.code);
                    out.push(format!("{at}: {said}"));
                }
            }
            Kind::Struct(inner) => validator_lines(inner, &at, out),
            Kind::List(items) => {
                for (index, inner) in items {
                    validator_lines(inner, &format!("{at}[{index}]"), out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Payment {
        amount: i32,
        kind: Kind,
        #[serde(default)]
        lines: Option<[u8; 2]>,
    }

    #[derive(Debug, Deserialize)]
    enum Kind {
        Card,
    }

    fn detail(body: &str) -> String {
        let error = serde_json::from_str::<Payment>(body).unwrap_err();
        assert_eq!(error.classify(), serde_json::error::Category::Data);
        shape_detail(&error)
    }

    #[test]
    fn the_detail_names_what_was_expected_and_where_never_what_was_sent() {
        let secret = "4111111111111111";
        for (body, said) in [
            (
                r#"{"amount": "4111111111111111", "kind": "Card"}"#,
                "invalid type, expected i32 at line 1 column 29",
            ),
            (
                r#"{"amount": 4111111111111111, "kind": "Card"}"#,
                "invalid value, expected i32 at line 1 column 27",
            ),
            (
                r#"{"amount": 1, "kind": "4111111111111111, expected x"}"#,
                "unknown variant, expected `Card` at line 1 column 52",
            ),
            (
                r#"{"amount": 1, "kind": "Card", "4111111111111111": 1}"#,
                "unknown field, expected one of `amount`, `kind`, `lines` at line 1 column 48",
            ),
            (
                r#"{"amount": 1, "kind": "Card", "lines": [4]}"#,
                "invalid length, expected an array of length 2 at line 1 column 42",
            ),
            (
                r#"{"kind": "Card"}"#,
                "missing field `amount` at line 1 column 16",
            ),
        ] {
            let detail = detail(body);
            assert_eq!(detail, said, "{body}");
            assert!(
                !detail.contains(secret) && !detail.contains("4111"),
                "{detail}"
            );
        }
    }

    #[test]
    fn words_of_its_own_are_left_out() {
        assert_eq!(
            without_values("not a card: 4111111111111111"),
            "invalid value"
        );
        assert_eq!(
            without_values("unknown field `a, expected b`, there are no fields"),
            "unknown field, there are no fields"
        );
        assert_eq!(
            without_values("invalid type: map"),
            "invalid type, expected another value"
        );
    }

    #[cfg(feature = "validator")]
    #[test]
    fn validator_params_are_left_out() {
        let mut errors = validator::ValidationErrors::new();
        let mut range = validator::ValidationError::new("range");
        range.add_param("value".into(), &"4111111111111111");
        errors.add("card", range);
        errors.add(
            "amount",
            validator::ValidationError::new("range").with_message("too large".into()),
        );
        assert_eq!(validator_detail(&errors), "amount: too large\ncard: range");
    }
}
