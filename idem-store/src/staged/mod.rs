//! Staged mode's statements: reserve a key with a lease, take an expired lease over, renew
//! it, journal a step, finish, release; and find stuck keys.
//!
//! Every write of an attempt is fenced by its [`Fence`] ([the key table](crate#the-key-table)):
//! it answers `false`, changing nothing, once the attempt moved on or the reservation it
//! belongs to is gone (an operator deleted the key, and a new request reserved it again). The runtime composes these
//! in `idem_runtime::staged`; operators act on the same rows through [`crate::KeyTable::act`].

use crate::key::KeyRef;

mod primitives;

pub use primitives::*;

/// A new staged key ([`reserve`](crate::staged::reserve)).
#[derive(Debug, Clone, Copy)]
pub struct Reservation<'a> {
    /// The key.
    pub key: KeyRef<'a>,
    /// The request's fingerprint.
    pub fingerprint: &'a [u8],
    /// The request, as JSON, for resuming without its client.
    pub request: &'a str,
    /// Now (`created_at`).
    pub created_ms: i64,
    /// `expires_at`, which counts for nothing while the key is processing
    /// ([`Ending::expires_ms`] replaces it).
    pub expires_ms: i64,
    /// The first attempt's lease (`locked_until`).
    pub locked_until_ms: i64,
    /// Replace a completed row that had expired by [`Reservation::created_ms`] (an operation
    /// that runs expired keys again), as [`reserve`](crate::staged::reserve) says.
    pub replace_expired: bool,
    /// This reservation's identity (the `reservation` column): random, never 0, the same for
    /// every attempt at it ([`Fence::reservation`]).
    pub id: i64,
    /// The request's field digests (`field_digests`), if kept.
    pub field_digests: Option<&'a [u8]>,
}

/// What fences an attempt's writes: the reservation it runs and its number. A write
/// changes the row only while both are still the row's: a takeover moves the number on,
/// and a key deleted and reserved again has another reservation (whose attempt numbers
/// start at 1 again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The `reservation` column ([`Reservation::id`]; 0 for rows reserved before it
    /// existed, and read so for atomic mode's rows, where it is NULL).
    pub reservation: i64,
    /// The `attempt` column: 1 for the first attempt, one more at every takeover.
    pub attempt: i64,
}

/// An attempt's hold on a staged key: what [`take_over`](crate::staged::take_over) returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The attempt's identity.
    pub fence: Fence,
    /// The journal so far: a JSON object from step name to result (`None`: no step yet).
    pub journal: Option<String>,
    /// The request the key was reserved with (JSON).
    pub request: Option<String>,
    /// The fingerprint the key was reserved with.
    pub fingerprint: Vec<u8>,
}

/// A staged key whose lease ran out ([`stuck`](crate::staged::stuck)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckKey {
    /// `global`, `tenant:<id>` or `user:<id>`.
    pub scope: String,
    /// The operation id.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// The attempt that held it.
    pub fence: Fence,
}

impl StuckKey {
    /// The key's identity.
    #[must_use]
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

/// The response a staged key ends with ([`finish`](crate::staged::finish)), in its columns' form.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// `response_status`.
    pub status: u16,
    /// `response_headers` ([`crate::StoredResponse::encode_headers`]).
    pub headers_json: &'a str,
    /// `response_body`.
    pub body: &'a [u8],
    /// `completed_at`.
    pub completed_ms: i64,
    /// `expires_at`: the completion plus the operation's TTL ([`crate::KeyStatus`]).
    pub expires_ms: i64,
}
