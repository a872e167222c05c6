//! [`OperationDoc`]: what the documents say about one operation, as plain data; the
//! application's own problems ([`ProblemDoc`]) and the request's body ([`RequestBodyDoc`]).

mod body;
mod problem;

use std::time::Duration;

use idem_spec::{
    ExpiryPolicy, InFlightPolicy, KeyFormat, KeyPart, KeyRequirement, Mode, OperationSpec,
    ScopeKind, check_header_name, check_pointer,
};
use serde::{Deserialize, Serialize};

pub use self::body::RequestBodyDoc;
pub use self::problem::ProblemDoc;

/// One idempotent operation as the documents describe it: its [`OperationSpec`], and where it
/// is served (method and path), which handler runs it and where that handler is written.
///
/// Serialised as JSON with the same spellings as the attribute (`"24h"`, `"tenant"`,
/// `"gone"`), so that tools can store and read it.
///
/// ```
/// use std::time::Duration;
/// use idem_docs::OperationDoc;
/// use idem_spec::{OperationSpec, ScopeKind};
///
/// let spec = OperationSpec::new("create_order:v1")
///     .scope(ScopeKind::Tenant)
///     .ttl(Duration::from_secs(3600));
/// let doc = OperationDoc::from_spec(&spec)
///     .path("POST", "/orders")
///     .handler("create_order");
/// let json = serde_json::to_value(&doc).unwrap();
/// assert_eq!(json["ttl"], "1h");
/// assert_eq!(json["scope"], "tenant");
/// let back: OperationDoc = serde_json::from_value(json).unwrap();
/// assert_eq!(back, doc);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OperationDoc {
    /// The versioned operation id, `<name>:v<version>`.
    pub id: String,
    /// The name part of the id.
    pub name: String,
    /// The version part of the id.
    pub version: u32,
    /// How long a key and its stored response are kept.
    #[serde(with = "duration")]
    pub ttl: Duration,
    /// Whose keys share one namespace.
    #[serde(with = "word")]
    pub scope: ScopeKind,
    /// What a request with an expired key gets.
    #[serde(with = "word")]
    pub on_expired: ExpiryPolicy,
    /// Whether a request without `Idempotency-Key` is accepted. A key taken from the request
    /// ([`OperationDoc::key_from`] not empty) is always required.
    #[serde(with = "word")]
    pub key: KeyRequirement,
    /// Where the key comes from: empty for the `Idempotency-Key` header (the default),
    /// otherwise the parts of the request it is made of, in order
    /// ([`KeySource::Parts`](idem_spec::KeySource::Parts)). Serialised as
    /// `"key_from": [{"header": "webhook-id"}, {"body": "/id"}]`, and left out when empty, so
    /// that documents written before it read back unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_from: Vec<KeyPartDoc>,
    /// Which spellings of `Idempotency-Key` the server accepts: a setting of the server, not
    /// of the operation ([`KeyFormat`]; the runtime's `Config::key_format`), so that the
    /// documents describe exactly what it accepts. Documents written before it read back as
    /// the default, `lenient`.
    #[serde(with = "word", default)]
    pub key_format: KeyFormat,
    /// How effects are made exactly-once.
    #[serde(with = "word")]
    pub mode: Mode,
    /// Staged mode: how long an attempt holds its key without renewing its lease.
    #[serde(with = "duration")]
    pub lease: Duration,
    /// Staged mode: what a retry gets while the key's execution runs.
    #[serde(with = "word")]
    pub on_in_flight: InFlightPolicy,
    /// Client errors are stored and replayed.
    pub store_client_errors: bool,
    /// A `422` for a reused key names the fields that differ. Serialised only when off, so
    /// that documents written before it read back unchanged (on).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub mismatch_detail: bool,
    /// The server seals what it stores at rest (the runtime's `Config::storage_keys`), so
    /// that a key's stored values may fail their check: the documents then list `500
    /// sealed-unreadable`. (`503 storage-key-unknown`, a value sealed under a storage key
    /// the server lacks, is listed for every server: one given no keys answers it too, for
    /// a key another instance sealed.) Serialised only when set, so that documents stored
    /// before it read back unchanged (off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub sealed_at_rest: bool,
    /// Dotted paths left out of the fingerprint.
    pub fingerprint_exclude: Vec<String>,
    /// The HTTP method, upper case (`POST`), when known.
    pub method: Option<String>,
    /// The route's path (`/orders`), when known.
    pub path: Option<String>,
    /// The handler's name; empty when unknown.
    pub handler: String,
    /// Where the handler is written, `file:line`, when known. A location in the server's
    /// code, for its developers: the documents leave it out unless
    /// [`OperationDoc::publish_source`] is set.
    pub source: Option<String>,
    /// The documents name [`OperationDoc::source`]: the Markdown beside the handler, the
    /// OpenAPI document as `x-idempotency.source`. Off by default: documents handed to
    /// clients do not tell them where the server's code is. Serialised only when set, so
    /// that documents stored before it read back unchanged (off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub publish_source: bool,
    /// Responses of the operation itself, besides idem's (its success, say), as
    /// `(status, description)`, sorted by status.
    pub responses: Vec<(u16, String)>,
    /// Problems the operation itself answers ([`ProblemDoc`]: a version conflict, say), each
    /// listed under its status with its type, sorted by status, each type once
    /// ([`OperationDoc::problem`]). Serialised only when there are some, so that documents
    /// stored before them read back unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<ProblemDoc>,
    /// The body the operation reads, when known ([`RequestBodyDoc`]: the attribute records
    /// it from the handler's body extractor): the OpenAPI document's `requestBody`.
    /// Serialised only when known, so that documents stored before it read back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_body: Option<RequestBodyDoc>,
    /// The handler takes the runtime's `webhooks::Verified`: requests are Standard Webhooks
    /// deliveries, whose `webhook-id`, `webhook-timestamp` and `webhook-signature` headers
    /// the documents list, with the `401` of a signature that does not verify
    /// ([`OperationDoc::verified_webhook`]). Serialised only when set, so that documents
    /// stored before it read back unchanged.
    #[serde(default, skip_serializing_if = "is_false")]
    pub verified_webhook: bool,
}

impl OperationDoc {
    /// The document of a spec, with nothing known of its route, handler or source.
    ///
    /// ```
    /// use idem_docs::OperationDoc;
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("POST /orders:v2"));
    /// assert_eq!((doc.name.as_str(), doc.version), ("POST /orders", 2));
    /// assert_eq!(doc.method, None);
    /// ```
    ///
    /// A key taken from the request keeps its parts:
    ///
    /// ```
    /// use idem_docs::{KeyPartDoc, OperationDoc};
    /// use idem_spec::{KeyPart, KeySource, OperationSpec};
    ///
    /// let spec = OperationSpec::new("stripe_event:v1").key_from(KeySource::Parts(&[KeyPart::Body("/id")]));
    /// let doc = OperationDoc::from_spec(&spec);
    /// assert_eq!(doc.key_from, [KeyPartDoc::Body("/id".to_owned())]);
    /// ```
    #[must_use]
    pub fn from_spec(spec: &OperationSpec) -> Self {
        let key_from: Vec<KeyPartDoc> = spec
            .key_source
            .parts()
            .iter()
            .map(KeyPartDoc::from)
            .collect();
        Self {
            id: spec.id.to_owned(),
            name: spec.name().to_owned(),
            version: spec.version(),
            ttl: spec.ttl,
            scope: spec.scope,
            on_expired: spec.on_expired,
            // A key taken from the request is required, whatever the order the spec was
            // built in.
            key: if key_from.is_empty() {
                spec.key
            } else {
                KeyRequirement::Required
            },
            key_from,
            key_format: KeyFormat::default(),
            mode: spec.mode,
            lease: spec.lease,
            on_in_flight: spec.on_in_flight,
            store_client_errors: spec.store_client_errors,
            mismatch_detail: spec.mismatch_detail,
            sealed_at_rest: false,
            fingerprint_exclude: spec
                .fingerprint_exclude
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            method: None,
            path: None,
            handler: String::new(),
            source: None,
            publish_source: false,
            responses: Vec::new(),
            problems: Vec::new(),
            request_body: None,
            verified_webhook: false,
        }
    }

    /// Sets the route: the method (upper-cased) and the path.
    ///
    /// ```
    /// use idem_docs::OperationDoc;
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("pay:v1")).path("post", "/payments");
    /// assert_eq!(doc.route().as_deref(), Some("POST /payments"));
    /// ```
    #[must_use]
    pub fn path(mut self, method: &str, path: &str) -> Self {
        self.method = Some(method.to_ascii_uppercase());
        self.path = Some(path.to_owned());
        self
    }

    /// Sets the spellings of `Idempotency-Key` the server accepts ([`KeyFormat`]).
    ///
    /// ```
    /// use idem_docs::{OperationDoc, openapi};
    /// use idem_spec::{KeyFormat, OperationSpec};
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("pay:v1"))
    ///     .path("POST", "/payments")
    ///     .key_format(KeyFormat::Strict);
    /// let api = openapi(&[doc]);
    /// let pattern = &api["paths"]["/payments"]["post"]["parameters"][0]["schema"]["pattern"];
    /// assert!(pattern.as_str().unwrap().starts_with("^\""), "{pattern}");
    /// ```
    #[must_use]
    pub fn key_format(mut self, format: KeyFormat) -> Self {
        self.key_format = format;
        self
    }

    /// Whether the server seals what it stores at rest ([`OperationDoc::sealed_at_rest`]):
    /// the documents then list `500 sealed-unreadable`.
    ///
    /// ```
    /// use idem_docs::{OperationDoc, markdown};
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("pay:v1")).path("POST", "/payments");
    /// let clear = markdown(std::slice::from_ref(&doc));
    /// assert!(!clear.contains("sealed-unreadable"));
    /// assert!(clear.contains("| 503 `urn:idem:problem:storage-key-unknown` + `Retry-After` |"));
    /// let sealed = markdown(&[doc.sealed_at_rest(true)]);
    /// assert!(sealed.contains("| 500 `urn:idem:problem:sealed-unreadable` |"));
    /// ```
    #[must_use]
    pub fn sealed_at_rest(mut self, sealed: bool) -> Self {
        self.sealed_at_rest = sealed;
        self
    }

    /// Sets the handler's name.
    #[must_use]
    pub fn handler(mut self, handler: &str) -> Self {
        handler.clone_into(&mut self.handler);
        self
    }

    /// Sets where the handler is written (`src/orders.rs:212`). The documents leave it out
    /// unless [`OperationDoc::publish_source`] asks for it.
    #[must_use]
    pub fn source(mut self, source: &str) -> Self {
        self.source = Some(source.to_owned());
        self
    }

    /// Whether the documents name [`OperationDoc::source`] (off by default): the Markdown
    /// beside the operation's handler, the OpenAPI document as `x-idempotency.source`. For
    /// documents read by the server's own developers; documents handed to clients should not
    /// tell them where the server's code is.
    ///
    /// ```
    /// use idem_docs::{OperationDoc, markdown, openapi};
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("pay:v1"))
    ///     .path("POST", "/payments")
    ///     .source("src/payments.rs:42");
    /// assert!(!markdown(std::slice::from_ref(&doc)).contains("src/payments.rs:42"));
    /// let api = openapi(std::slice::from_ref(&doc));
    /// assert!(api["paths"]["/payments"]["post"]["x-idempotency"].get("source").is_none());
    ///
    /// let doc = doc.publish_source(true);
    /// assert!(markdown(std::slice::from_ref(&doc)).contains("`src/payments.rs:42`"));
    /// let api = openapi(&[doc]);
    /// assert_eq!(api["paths"]["/payments"]["post"]["x-idempotency"]["source"], "src/payments.rs:42");
    /// ```
    #[must_use]
    pub fn publish_source(mut self, publish: bool) -> Self {
        self.publish_source = publish;
        self
    }

    /// Where the handler is written, when the documents name it: [`OperationDoc::source`]
    /// if [`OperationDoc::publish_source`] is set.
    pub(crate) fn published_source(&self) -> Option<&str> {
        self.source.as_deref().filter(|_| self.publish_source)
    }

    /// Adds a response of the operation itself (its success, an error of its own), listed
    /// beside idem's. A status given twice keeps the last description.
    ///
    /// ```
    /// use idem_docs::OperationDoc;
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("pay:v1"))
    ///     .responds(201, "the payment")
    ///     .responds(201, "the payment, created");
    /// assert_eq!(doc.responses, [(201, "the payment, created".to_owned())]);
    /// ```
    #[must_use]
    pub fn responds(mut self, status: u16, description: &str) -> Self {
        self.responses.retain(|(s, _)| *s != status);
        self.responses.push((status, description.to_owned()));
        self.responses.sort_by_key(|(s, _)| *s);
        self
    }

    /// Adds a problem the operation itself answers ([`ProblemDoc`]), listed under its status
    /// with its type, beside idem's problems of that status; with retry advice only when it
    /// carries `Retry-After`. A type given twice keeps the last.
    ///
    /// ```
    /// use idem_docs::{OperationDoc, ProblemDoc, markdown, openapi};
    /// use idem_spec::OperationSpec;
    ///
    /// let doc = OperationDoc::from_spec(&OperationSpec::new("update_order:v1"))
    ///     .path("PUT", "/orders/{id}")
    ///     .problem(ProblemDoc::new(409, "urn:example:version-conflict", "version conflict"));
    /// assert!(markdown(std::slice::from_ref(&doc)).contains("| 409 `urn:example:version-conflict` |"));
    /// let api = openapi(&[doc]);
    /// let conflict = &api["paths"]["/orders/{id}"]["put"]["responses"]["409"];
    /// let types = &conflict["content"]["application/problem+json"]["x-problem-types"];
    /// assert_eq!(types[1], "urn:example:version-conflict");
    /// ```
    #[must_use]
    pub fn problem(mut self, problem: ProblemDoc) -> Self {
        self.problems.retain(|p| p.type_uri != problem.type_uri);
        self.problems.push(problem);
        self.problems.sort_by_key(|p| p.status);
        self
    }

    /// Sets the body the operation reads ([`RequestBodyDoc`]): the OpenAPI document's
    /// `requestBody`, and its component schemas in `components.schemas`.
    #[must_use]
    pub fn request_body(mut self, body: RequestBodyDoc) -> Self {
        self.request_body = Some(body);
        self
    }

    /// Marks the operation as a receiver of Standard Webhooks deliveries verified before it
    /// runs (the runtime's `webhooks::Verified`, which the attribute sees among the handler's
    /// arguments): the documents list the `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature` request headers ([`contract::WEBHOOK_HEADERS`]) and the `401`
    /// [`contract::WEBHOOK_UNVERIFIED`] of a delivery whose signature does not verify.
    ///
    /// [`contract::WEBHOOK_HEADERS`]: crate::contract::WEBHOOK_HEADERS
    /// [`contract::WEBHOOK_UNVERIFIED`]: crate::contract::WEBHOOK_UNVERIFIED
    ///
    /// ```
    /// use idem_docs::{OperationDoc, markdown, openapi};
    /// use idem_spec::{KeyPart, KeySource, OperationSpec};
    ///
    /// let spec = OperationSpec::new("provider_event:v1")
    ///     .key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")]));
    /// let doc = OperationDoc::from_spec(&spec)
    ///     .path("POST", "/webhooks/provider")
    ///     .verified_webhook();
    /// let api = openapi(std::slice::from_ref(&doc));
    /// let post = &api["paths"]["/webhooks/provider"]["post"];
    /// let names: Vec<&str> = post["parameters"].as_array().unwrap().iter()
    ///     .map(|p| p["name"].as_str().unwrap())
    ///     .collect();
    /// assert_eq!(names, ["webhook-id", "webhook-timestamp", "webhook-signature"]);
    /// assert_eq!(
    ///     post["responses"]["401"]["content"]["application/problem+json"]["x-problem-types"][0],
    ///     "urn:idem:problem:webhook-unverified"
    /// );
    /// assert!(markdown(&[doc]).contains("| 401 `urn:idem:problem:webhook-unverified` |"));
    /// ```
    #[must_use]
    pub fn verified_webhook(mut self) -> Self {
        self.verified_webhook = true;
        self
    }

    /// `METHOD /path` when both are known.
    #[must_use]
    pub fn route(&self) -> Option<String> {
        Some(format!("{} {}", self.method.as_ref()?, self.path.as_ref()?))
    }

    /// The title the documents give the operation: its route, or else its name.
    #[must_use]
    pub fn title(&self) -> String {
        self.route().unwrap_or_else(|| self.name.clone())
    }
}

/// One part of a key taken from the request: [`KeyPart`] with owned strings, as documents
/// keep it.
///
/// Serialised as a one-entry object, `{"header": "webhook-id"}` or `{"body": "/id"}`.
/// Reading one back checks it as the attribute does: a header name in lower case, a JSON
/// pointer to a field.
///
/// ```
/// use idem_docs::KeyPartDoc;
/// use idem_spec::KeyPart;
///
/// let part = KeyPartDoc::from(KeyPart::Header("webhook-id"));
/// assert_eq!(serde_json::to_value(&part).unwrap(), serde_json::json!({"header": "webhook-id"}));
/// assert_eq!(part.spelling(), r#"header("webhook-id")"#);
/// assert!(serde_json::from_str::<KeyPartDoc>(r#"{"body": "id"}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "RawKeyPart")]
pub enum KeyPartDoc {
    /// A request header's value ([`KeyPart::Header`]); the name is lower case.
    Header(String),
    /// A field of the JSON body, named by a JSON pointer ([`KeyPart::Body`]).
    Body(String),
}

impl KeyPartDoc {
    /// The part as the attribute spells it: `header("webhook-id")`, `body("/id")`.
    #[must_use]
    pub fn spelling(&self) -> String {
        match self {
            Self::Header(name) => format!("header({name:?})"),
            Self::Body(pointer) => format!("body({pointer:?})"),
        }
    }
}

impl From<KeyPart> for KeyPartDoc {
    fn from(part: KeyPart) -> Self {
        match part {
            KeyPart::Header(name) => Self::Header(name.to_owned()),
            KeyPart::Body(pointer) => Self::Body(pointer.to_owned()),
        }
    }
}

impl From<&KeyPart> for KeyPartDoc {
    fn from(part: &KeyPart) -> Self {
        Self::from(*part)
    }
}

/// [`KeyPartDoc`] as read, before it is checked.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawKeyPart {
    Header(String),
    Body(String),
}

impl TryFrom<RawKeyPart> for KeyPartDoc {
    type Error = idem_spec::KeyPartError;

    fn try_from(raw: RawKeyPart) -> Result<Self, Self::Error> {
        match raw {
            RawKeyPart::Header(name) => check_header_name(&name).map(|()| Self::Header(name)),
            RawKeyPart::Body(pointer) => check_pointer(&pointer).map(|()| Self::Body(pointer)),
        }
    }
}

/// `skip_serializing_if` for flags that are off by default.
fn is_false(value: &bool) -> bool {
    !*value
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_true(value: &bool) -> bool {
    *value
}

fn yes() -> bool {
    true
}

/// Vocabulary words as their spellings.
mod word {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<T: Display, S: Serializer>(
        value: &T,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub(super) fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Durations as the attribute writes them (`"24h"`).
mod duration {
    use std::time::Duration;

    use idem_spec::{format_duration, parse_duration};
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(*value))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_words_and_durations_are_errors_not_panics() {
        let doc = OperationDoc::from_spec(&OperationSpec::new("x:v1"));
        let mut json = serde_json::to_value(&doc).unwrap();
        json["scope"] = "everyone".into();
        assert!(serde_json::from_value::<OperationDoc>(json.clone()).is_err());
        json["scope"] = "user".into();
        json["ttl"] = "24 hours".into();
        assert!(serde_json::from_value::<OperationDoc>(json).is_err());
    }

    #[test]
    fn key_parts_serialise_as_one_entry_objects() {
        let parts = [
            KeyPartDoc::from(KeyPart::Header("webhook-id")),
            KeyPartDoc::from(&KeyPart::Body("/data/a~1b")),
        ];
        let json = serde_json::to_value(&parts).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"header": "webhook-id"}, {"body": "/data/a~1b"}])
        );
        let back: Vec<KeyPartDoc> = serde_json::from_value(json).unwrap();
        assert_eq!(back, parts);
    }

    #[test]
    fn a_default_key_leaves_key_from_out() {
        let doc = OperationDoc::from_spec(&OperationSpec::new("x:v1"));
        let json = serde_json::to_value(&doc).unwrap();
        assert!(json.get("key_from").is_none());
        let back: OperationDoc = serde_json::from_value(json).unwrap();
        assert_eq!(back, doc);
    }
}
