//! Operations: their versioned id and their specification.

use std::fmt;
use std::time::Duration;

use crate::duration::describe_duration;
use crate::key_source::KeySource;
use crate::words::{ExpiryPolicy, InFlightPolicy, KeyRequirement, Mode, ScopeKind};

/// Why an operation name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperationIdError {
    /// Empty or only spaces.
    Empty,
    /// Contains `:`, which separates the version.
    Colon,
    /// Contains a control character.
    Control,
    /// Longer than 200 bytes.
    TooLong,
    /// Version 0.
    VersionZero,
}

impl fmt::Display for OperationIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "the operation name is empty",
            Self::Colon => "the operation name may not contain `:`; the version is added as `:v1`",
            Self::Control => "the operation name may not contain control characters",
            Self::TooLong => "the operation name is longer than 200 bytes",
            Self::VersionZero => "versions start at 1",
        })
    }
}

impl std::error::Error for OperationIdError {}

/// The stored, versioned id of an operation: `<name>:v<version>`.
///
/// ```
/// use idem_spec::{operation_id, split_operation_id};
///
/// assert_eq!(operation_id("POST /orders", 2).as_deref(), Ok("POST /orders:v2"));
/// assert_eq!(split_operation_id("POST /orders:v2"), Some(("POST /orders", 2)));
/// assert!(operation_id("a:b", 1).is_err());
/// ```
///
/// # Errors
/// When the name is empty, has a `:` or a control character, or is too long, or the version
/// is 0.
pub fn operation_id(name: &str, version: u32) -> Result<String, OperationIdError> {
    if name.trim().is_empty() {
        return Err(OperationIdError::Empty);
    }
    if name.contains(':') {
        return Err(OperationIdError::Colon);
    }
    if name.chars().any(char::is_control) {
        return Err(OperationIdError::Control);
    }
    if name.len() > 200 {
        return Err(OperationIdError::TooLong);
    }
    if version == 0 {
        return Err(OperationIdError::VersionZero);
    }
    Ok(format!("{name}:v{version}"))
}

/// Splits an operation id into its name and version; `None` if it is not one.
#[must_use]
pub fn split_operation_id(id: &str) -> Option<(&str, u32)> {
    let (name, version) = id.rsplit_once(":v")?;
    let version: u32 = version.parse().ok().filter(|v| *v > 0)?;
    (!name.is_empty() && !name.contains(':')).then_some((name, version))
}

/// Everything idem needs to know about one operation. The attribute emits one per handler;
/// the plain function API takes one directly.
///
/// ```
/// use std::time::Duration;
/// use idem_spec::{ExpiryPolicy, OperationSpec, ScopeKind};
///
/// const SEND_WELCOME: OperationSpec = OperationSpec::new("send-welcome-email:v1")
///     .ttl(Duration::from_secs(7 * 24 * 3600))
///     .scope(ScopeKind::User)
///     .on_expired(ExpiryPolicy::Reexecute);
/// assert_eq!(SEND_WELCOME.name(), "send-welcome-email");
/// assert_eq!(SEND_WELCOME.version(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperationSpec {
    /// Stable, versioned operation id ([`operation_id`]), part of the key's identity and of
    /// the fingerprint: `create_order:v1`, or `POST /orders:v1` when the attribute names the
    /// operation.
    pub id: &'static str,
    /// How long a key and its stored response are kept.
    pub ttl: Duration,
    /// Whose keys share a namespace.
    pub scope: ScopeKind,
    /// What a request with an expired key gets.
    pub on_expired: ExpiryPolicy,
    /// Whether requests without a key are accepted. A key taken from the request
    /// ([`KeySource::Parts`]) is always required.
    pub key: KeyRequirement,
    /// Where the key comes from: the `Idempotency-Key` header, or parts of the request.
    pub key_source: KeySource,
    /// How effects are made exactly-once.
    pub mode: Mode,
    /// Store `4xx` responses (with the handler's writes rolled back) so that retries replay
    /// them, instead of rolling back and letting the key be used again.
    pub store_client_errors: bool,
    /// Dotted paths left out of the fingerprint (`body.note`).
    pub fingerprint_exclude: &'static [&'static str],
    /// Staged mode: how long an attempt holds the key without renewing its lease (its
    /// heartbeat renews it at a third of this). Past it, a retry or the reconciler takes the
    /// key over and resumes it.
    pub lease: Duration,
    /// Staged mode: what a retry gets while the key's execution is running.
    pub on_in_flight: InFlightPolicy,
    /// A `422` for a key used with another request names the fields that differ (a digest
    /// of each field is stored with the key; never a value). Off for an operation whose
    /// field names are themselves sensitive.
    pub mismatch_detail: bool,
}

impl OperationSpec {
    /// A spec with the defaults: 24 h, global scope, `gone` after expiry, key required,
    /// atomic mode. `id` should come from [`operation_id`] (`name:v1`).
    #[must_use]
    pub const fn new(id: &'static str) -> Self {
        Self {
            id,
            ttl: Duration::from_secs(24 * 3600),
            scope: ScopeKind::Global,
            on_expired: ExpiryPolicy::Gone,
            key: KeyRequirement::Required,
            key_source: KeySource::IdempotencyKey,
            mode: Mode::Atomic,
            store_client_errors: false,
            fingerprint_exclude: &[],
            lease: Duration::from_secs(30),
            on_in_flight: InFlightPolicy::Reject,
            mismatch_detail: true,
        }
    }

    /// Sets [`OperationSpec::lease`].
    #[must_use]
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`OperationSpec::on_in_flight`].
    #[must_use]
    pub const fn on_in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.on_in_flight = policy;
        self
    }

    /// Sets [`OperationSpec::ttl`].
    #[must_use]
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`OperationSpec::scope`].
    #[must_use]
    pub const fn scope(mut self, scope: ScopeKind) -> Self {
        self.scope = scope;
        self
    }

    /// Sets [`OperationSpec::on_expired`].
    #[must_use]
    pub const fn on_expired(mut self, policy: ExpiryPolicy) -> Self {
        self.on_expired = policy;
        self
    }

    /// Sets [`OperationSpec::key`].
    #[must_use]
    pub const fn key(mut self, key: KeyRequirement) -> Self {
        self.key = key;
        self
    }

    /// Sets [`OperationSpec::key_source`]; a key taken from the request is required.
    #[must_use]
    pub const fn key_from(mut self, source: KeySource) -> Self {
        self.key_source = source;
        if let KeySource::Parts(_) = source {
            self.key = KeyRequirement::Required;
        }
        self
    }

    /// Sets [`OperationSpec::mode`].
    #[must_use]
    pub const fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`OperationSpec::store_client_errors`].
    #[must_use]
    pub const fn store_client_errors(mut self, store: bool) -> Self {
        self.store_client_errors = store;
        self
    }

    /// Sets [`OperationSpec::mismatch_detail`].
    #[must_use]
    pub const fn mismatch_detail(mut self, detail: bool) -> Self {
        self.mismatch_detail = detail;
        self
    }

    /// Sets [`OperationSpec::fingerprint_exclude`].
    #[must_use]
    pub const fn fingerprint_exclude(mut self, paths: &'static [&'static str]) -> Self {
        self.fingerprint_exclude = paths;
        self
    }

    /// The name part of the id (`POST /orders` of `POST /orders:v1`); the whole id if it has
    /// no version.
    #[must_use]
    pub fn name(&self) -> &'static str {
        split_operation_id(self.id).map_or(self.id, |(name, _)| name)
    }

    /// The version part of the id; 1 if it has none.
    #[must_use]
    pub fn version(&self) -> u32 {
        split_operation_id(self.id).map_or(1, |(_, version)| version)
    }

    /// The client's contract in words, for documentation (rustdoc, Markdown, the operator
    /// tool).
    ///
    /// ```
    /// use idem_spec::{OperationSpec, ScopeKind};
    ///
    /// let spec = OperationSpec::new("POST /orders:v1").scope(ScopeKind::Tenant);
    /// assert_eq!(
    ///     spec.describe(),
    ///     "Keys are unique per tenant and kept for 24 hours. A request without an \
    ///      `Idempotency-Key` is refused (400). A retry with the same key and the same request \
    ///      replays the stored response (`Idempotent-Replayed: true`); the same key with a \
    ///      different request is refused (422); a retry while the first request is still \
    ///      running waits for it, then replays its response, or is answered 409 \
    ///      `urn:idem:problem:in-flight` with `Retry-After`. Failed responses (4xx, 5xx) are not stored: retrying with the same \
    ///      key runs the operation again. After 24 hours the key is gone (410) and nothing runs."
    /// );
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        let ttl = describe_duration(self.ttl);
        let namespace = match self.scope {
            ScopeKind::Global => "operation",
            ScopeKind::Tenant => "tenant",
            ScopeKind::User => "user",
        };
        let without_key = match (self.key_source, self.key) {
            (KeySource::IdempotencyKey, KeyRequirement::Required) => {
                "A request without an `Idempotency-Key` is refused (400).".to_owned()
            }
            (KeySource::IdempotencyKey, KeyRequirement::Optional) => {
                "A request without an `Idempotency-Key` runs once, unprotected against retries."
                    .to_owned()
            }
            (source, _) => {
                format!("The key is {source}; a request without it is refused (400).")
            }
        };
        let failures = if self.store_client_errors {
            "Client errors (4xx) are stored and replayed like successes, with the operation's \
             writes rolled back; server errors (5xx) are not stored."
        } else {
            "Failed responses (4xx, 5xx) are not stored: retrying with the same key runs the \
             operation again."
        };
        let expired = match self.on_expired {
            ExpiryPolicy::Gone => "the key is gone (410) and nothing runs",
            ExpiryPolicy::Reexecute => "the key is free again and a request with it runs anew",
        };
        if self.mode == Mode::Staged {
            let in_flight = match self.on_in_flight {
                InFlightPolicy::Reject => {
                    "is answered 409 `urn:idem:problem:in-flight` with `Retry-After`"
                }
                InFlightPolicy::Wait => {
                    "waits for it and replays its response (409 `urn:idem:problem:in-flight` \
                     with `Retry-After` if it takes too long)"
                }
            };
            return format!(
                "Keys are unique per {namespace} and kept for {ttl}. {without_key} The key is \
                 reserved when the request arrives and the operation runs in recorded steps: \
                 a step whose result was recorded does not run again, and a step interrupted \
                 before its result was recorded runs again with the same provider key (one \
                 effect needs a provider that deduplicates on it). A retry with the same key \
                 and the same request replays the stored response \
                 (`Idempotent-Replayed: true`); the same key with a different request is \
                 refused (422); a retry while the first request is still running {in_flight}. \
                 A request interrupted midway (503 `urn:idem:problem:interrupted` with \
                 `Retry-After`) is resumed from its last recorded step by a retry with the \
                 same key. A definitive failure (such as a declined payment) is stored and \
                 replayed like a success. After {ttl} {expired}."
            );
        }
        format!(
            "Keys are unique per {namespace} and kept for {ttl}. {without_key} A retry with the \
             same key and the same request replays the stored response \
             (`Idempotent-Replayed: true`); the same key with a different request is refused \
             (422); a retry while the first request is still running waits for it, then \
             replays its response, or is answered 409 `urn:idem:problem:in-flight` with \
             `Retry-After`. {failures} After {ttl} {expired}."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for (name, version) in [("create_order", 1), ("POST /orders", 12), ("a v1", 3)] {
            let id = operation_id(name, version).unwrap_or_default();
            assert_eq!(split_operation_id(&id), Some((name, version)));
        }
        assert_eq!(operation_id(" ", 1), Err(OperationIdError::Empty));
        assert_eq!(operation_id("a\n", 1), Err(OperationIdError::Control));
        assert_eq!(operation_id("a", 0), Err(OperationIdError::VersionZero));
        assert_eq!(
            operation_id(&"x".repeat(201), 1),
            Err(OperationIdError::TooLong)
        );
        assert_eq!(split_operation_id("nope"), None);
        assert_eq!(split_operation_id("a:v0"), None);
    }

    #[test]
    fn descriptions_follow_the_spec() {
        let spec = OperationSpec::new("x:v1")
            .on_expired(ExpiryPolicy::Reexecute)
            .key(KeyRequirement::Optional)
            .store_client_errors(true);
        let text = spec.describe();
        assert!(text.contains("runs once, unprotected"), "{text}");
        assert!(text.contains("Client errors (4xx) are stored"), "{text}");
        assert!(text.contains("runs anew"), "{text}");
        assert_eq!(spec.name(), "x");
    }

    #[test]
    fn staged_descriptions_promise_no_more_than_staged_mode_does() {
        let text = OperationSpec::new("pay:v1").mode(Mode::Staged).describe();
        assert!(!text.contains("never repeated"), "{text}");
        assert!(
            text.contains("runs again with the same provider key"),
            "{text}"
        );
    }

    #[test]
    fn a_key_from_the_request_is_required() {
        let spec = OperationSpec::new("hook:v1")
            .key(KeyRequirement::Optional)
            .key_from(KeySource::Parts(&[crate::KeyPart::Header("webhook-id")]));
        assert_eq!(spec.key, KeyRequirement::Required);
        let text = spec.describe();
        assert!(
            text.contains(
                "The key is the `webhook-id` header; a request without it is refused (400)."
            ),
            "{text}"
        );
    }
}
