//! The specification of one idempotent operation: a value the macro emits for every
//! annotated handler, and that the plain function API takes directly.

use std::time::Duration;

/// Whose keys share one namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    /// One namespace for every caller. For operations without callers of their own (jobs,
    /// webhooks from one provider).
    Global,
    /// One namespace per tenant, taken from the application's authenticated
    /// [`Principal`](crate::Principal), never from a client-supplied header.
    Tenant,
    /// One namespace per authenticated user.
    User,
}

impl ScopeKind {
    /// The spelling used in the attribute and in the stored `scope` column's prefix.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Tenant => "tenant",
            Self::User => "user",
        }
    }
}

/// What a request with an expired key gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryPolicy {
    /// `410 Gone`; nothing runs. The default: a client retrying after the TTL is more likely
    /// a bug than a new intent.
    #[default]
    Gone,
    /// The old row is replaced atomically and the operation runs again, as if the key were new.
    Reexecute,
}

/// Whether a request without `Idempotency-Key` is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyRequirement {
    /// Missing key → `400`. The default.
    #[default]
    Required,
    /// Missing key → the handler runs once in its transaction, with no protection.
    Optional,
}

/// Everything idem needs to know about one operation.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::{ExpiryPolicy, OperationSpec, ScopeKind};
///
/// const SEND_WELCOME: OperationSpec = OperationSpec::new("send-welcome-email:v1")
///     .ttl(Duration::from_secs(7 * 24 * 3600))
///     .scope(ScopeKind::User)
///     .on_expired(ExpiryPolicy::Reexecute);
/// assert_eq!(SEND_WELCOME.id, "send-welcome-email:v1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationSpec {
    /// Stable, versioned operation id, part of the key's identity and of the fingerprint:
    /// `create_order:v1`, or `POST /orders:v1` when the attribute names the operation.
    pub id: &'static str,
    /// How long a key and its stored response are kept.
    pub ttl: Duration,
    /// Whose keys share a namespace.
    pub scope: ScopeKind,
    /// What a request with an expired key gets.
    pub on_expired: ExpiryPolicy,
    /// Whether requests without a key are accepted.
    pub key: KeyRequirement,
    /// Store `4xx` responses (with the handler's writes rolled back) so that retries replay
    /// them, instead of rolling back and letting the key be used again.
    pub store_client_errors: bool,
    /// Dotted paths left out of the fingerprint (`body.note`).
    pub fingerprint_exclude: &'static [&'static str],
}

impl OperationSpec {
    /// A spec with the defaults: 24 h, global scope, `gone` after expiry, key required.
    #[must_use]
    pub const fn new(id: &'static str) -> Self {
        Self {
            id,
            ttl: Duration::from_secs(24 * 3600),
            scope: ScopeKind::Global,
            on_expired: ExpiryPolicy::Gone,
            key: KeyRequirement::Required,
            store_client_errors: false,
            fingerprint_exclude: &[],
        }
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

    /// Sets [`OperationSpec::store_client_errors`].
    #[must_use]
    pub const fn store_client_errors(mut self, store: bool) -> Self {
        self.store_client_errors = store;
        self
    }

    /// Sets [`OperationSpec::fingerprint_exclude`].
    #[must_use]
    pub const fn fingerprint_exclude(mut self, paths: &'static [&'static str]) -> Self {
        self.fingerprint_exclude = paths;
        self
    }
}
