//! JSON body extractors whose every rejection is `application/problem+json`.

use axum::RequestExt as _;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::invalid::{invalid_body, shape_detail};
use crate::fingerprint::{FingerprintError, Input, InputWriter, part};
use crate::problem::Problem;

/// The request body limit idem's body extractors apply, set by idempotent handlers'
/// context from [`crate::Config::max_request_body`]. Elsewhere 64 KiB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// A JSON request body, with problem+json rejections.
///
/// - `415 urn:idem:problem:unsupported-media-type` unless `Content-Type` is
///   `application/json` or `*+json`;
/// - `413 urn:idem:problem:body-too-large` beyond the smallest of the limits that apply:
///   [`crate::Config::max_request_body`] on idempotent handlers, axum's
///   [`DefaultBodyLimit`](axum::extract::DefaultBodyLimit) and tower-http's
///   `RequestBodyLimitLayer` (whose limit applies here to chunked bodies; a body that
///   declares a larger `Content-Length` is refused by the layer itself, with its own
///   response);
/// - `400 urn:idem:problem:body-unreadable` when the body cannot be read (the connection
///   broke);
/// - `400 urn:idem:problem:malformed-json` for JSON syntax errors, `422
///   urn:idem:problem:invalid-body` for JSON of the wrong shape: its detail says where and
///   what was expected, never what was sent.
///
/// A number written with a zero fraction (`9.0`, `1e2`) is the integer it equals, for an
/// integer field too: JSON Schema's `integer` counts it as one (so the OpenAPI documents of
/// an application describe it as valid), and the fingerprint already does (`9.0` and `9`
/// are one request).
///
/// It is the body part of the fingerprint, and a response too (like `axum::Json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonBody<T>(pub T);

/// A check of a deserialised body, run by [`Checked`] before the handler: invalid input
/// never reaches the store and never burns a key. Its error is answered as is (make it a
/// `422`).
///
/// ```
/// use axum::http::StatusCode;
/// use idem_runtime::{Check, Problem};
///
/// #[derive(serde::Deserialize)]
/// struct NewOrder { quantity: u32 }
///
/// impl Check for NewOrder {
///     fn check(&self) -> Result<(), Problem> {
///         if (1..=20).contains(&self.quantity) {
///             return Ok(());
///         }
///         Err(Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "urn:shop:quantity", "invalid quantity"))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no `Check`, which `Checked<{Self}>` runs on the body",
    label = "no `idem_runtime::Check` implementation",
    note = "implement `Check` for it, or take the body as `JsonBody<{Self}>`, which does not check"
)]
pub trait Check {
    /// `Ok` when the input is acceptable.
    ///
    /// # Errors
    /// The problem to answer with.
    fn check(&self) -> Result<(), Problem>;
}

/// A JSON body (as [`JsonBody`]) that must pass its [`Check`] before the handler runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checked<T>(pub T);

/// A JSON body (as [`JsonBody`]) validated with the `validator` crate before the handler
/// runs; its errors answer `422 urn:idem:problem:invalid-body` (feature `validator`).
#[cfg(feature = "validator")]
#[cfg_attr(docsrs, doc(cfg(feature = "validator")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Validated<T>(pub T);

/// A JSON body (as [`JsonBody`]) validated with the `garde` crate (with its default
/// context) before the handler runs; its errors answer `422 urn:idem:problem:invalid-body`
/// (feature `garde`).
#[cfg(feature = "garde")]
#[cfg_attr(docsrs, doc(cfg(feature = "garde")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Garde<T>(pub T);

macro_rules! json_extractor {
    ($($(#[$meta:meta])* $name:ident [$($bound:tt)*] |$value:ident| $check:expr;)*) => {$(
        $(#[$meta])*
        impl<S, T> FromRequest<S> for $name<T>
        where
            S: Send + Sync,
            T: DeserializeOwned + $($bound)*,
        {
            type Rejection = Problem;

            async fn from_request(req: Request, _state: &S) -> Result<Self, Problem> {
                let bytes = read_json(req).await?;
                let $value: T = parse(&bytes).map_err(|p| p.refusing(&bytes))?;
                $check.map_err(|p| p.refusing(&bytes))?;
                Ok(Self($value))
            }
        }

        // The validation's bound here too, so that a body type without it is reported at the
        // handler's argument (through `Input`), not only at `.route(…)`.
        $(#[$meta])*
        impl<T: Serialize + $($bound)*> Input for $name<T> {
            type Part = part::Body;
            fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
                out.value(&self.0)
            }
        }

        $(#[$meta])*
        impl<T: Serialize> IntoResponse for $name<T> {
            fn into_response(self) -> Response {
                axum::Json(self.0).into_response()
            }
        }
    )*};
}

json_extractor! {
    JsonBody [Sized] |value| Ok::<(), Problem>(());
    Checked [Check] |value| value.check();
    #[cfg(feature = "validator")]
    Validated [validator::Validate] |value| {
        validator::Validate::validate(&value)
            .map_err(|errors| invalid_body(super::invalid::validator_detail(&errors)))
    };
    #[cfg(feature = "garde")]
    Garde [garde::Validate<Context: Default>] |value| {
        garde::Validate::validate(&value).map_err(|report| invalid_body(report.to_string()))
    };
}

/// Reads a JSON body within every limit that applies.
async fn read_json(req: Request) -> Result<Bytes, Problem> {
    let json_content = req.headers().get(header::CONTENT_TYPE).is_some_and(is_json);
    if !json_content {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "urn:idem:problem:unsupported-media-type",
            "expected application/json",
        )
        .with_detail("send the body with `Content-Type: application/json`"));
    }
    read_body(req).await
}

/// Deserialises a JSON body: `422` for JSON of the wrong shape, `400` for the rest.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    parse_json(bytes).map_err(|error| match error.classify() {
        serde_json::error::Category::Data => invalid_body(shape_detail(&error)),
        _ => Problem::new(
            StatusCode::BAD_REQUEST,
            "urn:idem:problem:malformed-json",
            "invalid request body",
        )
        .with_detail(error.to_string()),
    })
}

/// Whether a `Content-Type` is JSON: `application/json` or `*+json`, in any case, with or
/// without parameters.
fn is_json(content_type: &HeaderValue) -> bool {
    let Ok(value) = content_type.to_str() else {
        return false;
    };
    let mime = value
        .split_once(';')
        .map_or(value, |(mime, _)| mime)
        .trim()
        .as_bytes();
    let suffix = mime.len().checked_sub(5).map(|at| &mime[at..]);
    mime.eq_ignore_ascii_case(b"application/json")
        || suffix.is_some_and(|s| s.eq_ignore_ascii_case(b"+json"))
}

/// Deserialises JSON, taking a number with a zero fraction as the integer it equals when the
/// type wants one. Only a body that does not deserialise as written pays for the second try.
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let error = match serde_json::from_slice(bytes) {
        Ok(value) => return Ok(value),
        Err(error) if error.classify() == serde_json::error::Category::Data => error,
        Err(error) => return Err(error),
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Err(error);
    };
    if !whole_numbers_as_integers(&mut value) {
        return Err(error);
    }
    // The first error names the line and column; the second try's would not.
    T::deserialize(value).map_err(|_| error)
}

/// Rewrites every float with a zero fraction that fits a 64-bit integer as that integer;
/// whether it rewrote any.
fn whole_numbers_as_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(number) => {
            let Some(float) = number.as_f64().filter(|_| number.is_f64()) else {
                return false;
            };
            // 2^63 and 2^64 are exact as floats; the casts below are exact within them.
            let integer = if float.fract() != 0.0 {
                return false;
            } else if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&float) {
                Value::from(float as i64)
            } else if (0.0..18_446_744_073_709_551_616.0).contains(&float) {
                Value::from(float as u64)
            } else {
                return false;
            };
            *value = integer;
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
            whole_numbers_as_integers(item) | changed
        }),
        Value::Object(members) => members.values_mut().fold(false, |changed, item| {
            whole_numbers_as_integers(item) | changed
        }),
        _ => false,
    }
}

/// Buffers the body within idem's limit, axum's `DefaultBodyLimit` and any limit a layer put
/// on the body (tower-http's `RequestBodyLimitLayer`).
pub(crate) async fn read_body(req: Request) -> Result<Bytes, Problem> {
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map_or(DEFAULT_BODY_LIMIT, |l| l.0);
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "urn:idem:problem:body-too-large",
            "request body too large",
        )
        .with_detail(format!(
            "the body is larger than this endpoint accepts (at most {limit} bytes)"
        ))
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    // `into_limited_body` applies axum's `DefaultBodyLimit`; a layer's limit is already
    // inside the body.
    let body = Limited::new(req.into_limited_body(), limit);
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if is_length_limit(&*error) => Err(too_large()),
        Err(error) => {
            tracing::debug!(%error, "request body could not be read");
            Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "urn:idem:problem:body-unreadable",
                "request body could not be read",
            )
            .with_detail("the connection broke or the body was malformed while it was read"))
        }
    }
}

/// Whether a body error is a length limit, however many layers wrapped it.
fn is_length_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<LengthLimitError>() {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::parse_json;
    use crate::fingerprint::Fingerprint;

    #[test]
    fn json_is_application_json_or_a_json_suffix_in_any_case() {
        let is_json = |value: &str| super::is_json(&http::HeaderValue::from_str(value).unwrap());
        for yes in [
            "application/json",
            "Application/JSON",
            " application/json ; charset=utf-8",
            "application/problem+json",
            "application/vnd.api+JSON;v=1",
        ] {
            assert!(is_json(yes), "{yes}");
        }
        for no in [
            "text/plain",
            "json",
            "+jso",
            "application/jsonp",
            "application/json-seq",
            "",
        ] {
            assert!(!is_json(no), "{no:?}");
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Order {
        quantity: i32,
        price: f64,
        tags: Vec<u64>,
    }

    #[test]
    fn a_whole_number_written_as_a_float_is_an_integer() {
        let order: Order =
            parse_json(br#"{"quantity": 9.0, "price": 2.0, "tags": [1e2, 3]}"#).unwrap();
        assert_eq!(
            order,
            Order {
                quantity: 9,
                price: 2.0,
                tags: vec![100, 3]
            }
        );
        // Fractions, and integers beyond 64 bits, are still refused, with the first error's
        // position.
        let error =
            parse_json::<Order>(br#"{"quantity": 9.5, "price": 1, "tags": []}"#).unwrap_err();
        assert!(error.to_string().contains("line 1 column"), "{error}");
        assert!(parse_json::<Order>(br#"{"quantity": 1e300, "price": 1, "tags": []}"#).is_err());
        assert!(parse_json::<Order>(br#"{"quantity": 1, "price": 1, "tags": [-1.0]}"#).is_err());
        // Syntax errors stay syntax errors.
        let error = parse_json::<Order>(b"{").unwrap_err();
        assert_eq!(error.classify(), serde_json::error::Category::Eof);
    }

    #[test]
    fn the_fingerprint_already_counts_them_as_one() {
        assert_eq!(
            Fingerprint::of("op:v1", &json!({"quantity": 9.0}), &[]).unwrap(),
            Fingerprint::of("op:v1", &json!({"quantity": 9}), &[]).unwrap()
        );
    }
}
