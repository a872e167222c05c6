#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod clock;
mod error;
pub mod failpoint;
mod fingerprint;
mod http;
mod idem;
mod key;
mod problem;
mod spec;
pub mod store;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::error::Error;
pub use crate::failpoint::{FailAction, FailPoint};
pub use crate::fingerprint::{Fingerprint, Input};
pub use crate::http::{
    Anonymous, BodyLimit, IdemState, Json, Principal, REPLAYED_HEADER, Validate, capture,
    into_response,
};
pub use crate::idem::{Call, Config, Idem, Outcome, OutcomeKind, Work, work_fn};
pub use crate::key::{IdempotencyKey, KeyError, KeyFormat};
pub use crate::problem::Problem;
pub use crate::spec::{ExpiryPolicy, KeyRequirement, OperationSpec, ScopeKind};
pub use crate::store::{Backend, Record};

#[doc = include_str!("../docs/idempotent.md")]
pub use idem_macros::idempotent;

/// Re-exported so that users need no extra dependency for the types in handler signatures.
pub use sqlx;

/// Re-exported for implementations of [`Input`].
pub use serde_json;

/// What the `#[idempotent]` expansion names. Not a public API: it changes between versions.
#[doc(hidden)]
pub mod __private {
    pub use crate::fingerprint::DynInput;
    pub use crate::http::{Ctx, GlobalScope, Handler, TenantScope, UserScope, fingerprint, run};
    pub use crate::spec::{ExpiryPolicy, KeyRequirement, OperationSpec, ScopeKind};
    pub use axum::response::{IntoResponse, Response};
    pub use core::time::Duration;
    pub use std::boxed::Box;

    /// One input part, as the expansion lists them (a function, not a cast, so that the
    /// error for a non-input points at the argument).
    pub fn input<T: DynInput>(part: &T) -> &dyn DynInput {
        part
    }

    /// Names the backend of a handler's transaction argument.
    pub trait TxArg {
        type Db: crate::Backend;
    }

    impl<DB: crate::Backend> TxArg for sqlx::Transaction<'static, DB> {
        type Db = DB;
    }
}
