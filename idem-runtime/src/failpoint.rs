//! Fault injection for crash and rollback tests (feature `failpoints`).
//!
//! A test arms one point with [`Idem::fail_at`](crate::Idem::fail_at); the next request
//! that reaches it fails there, then the point disarms. Without the feature every check
//! compiles to nothing.

use std::str::FromStr;

/// A place in the execution protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPoint {
    /// The handler returned (its business writes are done), before the response is written.
    AfterHandler,
    /// The response is written to the key row, before COMMIT.
    AfterRecord,
    /// COMMIT succeeded, before the response leaves the process.
    AfterCommit,
}

impl FailPoint {
    /// The name used in `IDEM_FAILPOINT`-style configuration.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AfterHandler => "after_handler",
            Self::AfterRecord => "after_record",
            Self::AfterCommit => "after_commit",
        }
    }
}

/// What happens at an armed point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAction {
    /// The protocol returns an error, as a failing database would: everything rolls back.
    Error,
    /// The process aborts on the spot, as a crash or `kill -9` would.
    Abort,
}

/// Parses `point=action`, e.g. `after_commit=abort`.
impl FromStr for FailPointSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (point, action) = s.split_once('=').unwrap_or((s, "error"));
        let point = match point.trim() {
            "after_handler" => FailPoint::AfterHandler,
            "after_record" => FailPoint::AfterRecord,
            "after_commit" => FailPoint::AfterCommit,
            other => return Err(format!("unknown fail point `{other}`")),
        };
        let action = match action.trim() {
            "error" => FailAction::Error,
            "abort" => FailAction::Abort,
            other => return Err(format!("unknown fail action `{other}`")),
        };
        Ok(Self(point, action))
    }
}

/// A point and its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPointSpec(pub FailPoint, pub FailAction);
