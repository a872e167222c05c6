//! How an execution ended, as the span's `outcome` and the metrics' labels spell it.

use crate::error::Error;
use crate::record::{Outcome, OutcomeKind};

/// How an execution ended, as the `outcome` field and label spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    Executed,
    Replayed,
    Mismatch,
    InFlight,
    Expired,
    Failed,
    Error,
    Rejected(Rejection),
}

/// Why a request was refused before the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rejection {
    MissingKey,
    InvalidKey,
    InvalidInput,
}

/// The outcomes counted in [`REQUESTS_TOTAL`], in label order.
pub(super) const COUNTED: [&str; 7] = [
    "executed",
    "replayed",
    "mismatch",
    "in_flight",
    "expired",
    "failed",
    "error",
];

/// The reasons counted in [`REJECTED_TOTAL`], in label order.
pub(super) const REASONS: [&str; 3] = ["missing_key", "invalid_key", "invalid_input"];

impl Ending {
    pub(super) fn of(result: &Result<Outcome, Error>) -> Self {
        match result {
            Ok(outcome) => match outcome.kind {
                OutcomeKind::Executed => Self::Executed,
                OutcomeKind::Replayed => Self::Replayed,
                _ => Self::Failed,
            },
            Err(error) => match error {
                Error::MissingKey | Error::KeyFromRequest { missing: true, .. } => {
                    Self::Rejected(Rejection::MissingKey)
                }
                Error::InvalidKey(_) | Error::KeyFromRequest { .. } => {
                    Self::Rejected(Rejection::InvalidKey)
                }
                Error::Input(_) => Self::Rejected(Rejection::InvalidInput),
                Error::Mismatch(_) => Self::Mismatch,
                Error::InFlight { .. } => Self::InFlight,
                Error::Expired => Self::Expired,
                Error::Interrupted { .. } => Self::Failed,
                _ => Self::Error,
            },
        }
    }

    /// The index in [`COUNTED`], or in [`REASONS`] for a rejection.
    pub(super) fn index(self) -> usize {
        match self {
            Self::Executed | Self::Rejected(Rejection::MissingKey) => 0,
            Self::Replayed | Self::Rejected(Rejection::InvalidKey) => 1,
            Self::Mismatch | Self::Rejected(Rejection::InvalidInput) => 2,
            Self::InFlight => 3,
            Self::Expired => 4,
            Self::Failed => 5,
            Self::Error => 6,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Rejected(_) => "rejected",
            counted => COUNTED[counted.index()],
        }
    }
}
