//! The vocabulary of idem's idempotent operations.
//!
//! One place says what an operation *is* — its id, scope, TTL, expiry policy, key requirement
//! and mode — and how each is written. The `#[idempotent]` attribute parses its arguments with
//! these types at compile time, the runtime executes them, the operator tool reads and writes
//! the same spellings, and the documentation generator describes them in the same words.
//!
//! ```
//! use std::time::Duration;
//! use idem_spec::{ExpiryPolicy, OperationSpec, ScopeKind, parse_duration};
//!
//! const CREATE_ORDER: OperationSpec = OperationSpec::new("POST /orders:v1")
//!     .scope(ScopeKind::Tenant)
//!     .ttl(Duration::from_secs(24 * 3600));
//! assert_eq!(CREATE_ORDER.ttl, parse_duration("24h").unwrap());
//! assert_eq!(CREATE_ORDER.on_expired, ExpiryPolicy::Gone);
//! assert!(CREATE_ORDER.describe().starts_with("Keys are unique per tenant"));
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]

mod duration;
mod key_source;
mod operation;
mod scope;
mod words;

pub use crate::duration::{
    DurationError, MAX_TTL, describe_duration, format_duration, parse_duration,
};
pub use crate::key_source::{KeyPart, KeyPartError, KeySource, check_header_name, check_pointer};
pub use crate::operation::{OperationIdError, OperationSpec, operation_id, split_operation_id};
pub use crate::scope::{Scope, ScopeError};
pub use crate::words::{
    ExpiryPolicy, InFlightPolicy, KeyFormat, KeyRequirement, Mode, ScopeKind, UnknownWord,
};
