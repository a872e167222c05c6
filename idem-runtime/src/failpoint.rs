//! Fault injection for crash and rollback tests (feature `failpoints`).
//!
//! A test arms one point with [`Idem::fail_at`](crate::Idem::fail_at); the next execution
//! that reaches it fails there, then the point disarms. Without the feature `FailPoints`
//! holds nothing and every check compiles to nothing; the module is public only with it.

#![cfg_attr(
    not(feature = "failpoints"),
    allow(dead_code, unreachable_pub, clippy::enum_variant_names)
)]

use std::str::FromStr;

use crate::error::Error;

/// A place in the execution protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
pub enum FailAction {
    /// The protocol returns an error, as a failing database would: everything rolls back.
    Error,
    /// The process aborts on the spot, as a crash or `kill -9` would.
    Abort,
}

/// A point and its action, parsed from `point=action` (`after_commit=abort`; the action
/// defaults to `error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPointSpec(pub FailPoint, pub FailAction);

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

/// The armed point of one [`Idem`](crate::Idem): a mutex with the feature, nothing without.
#[derive(Debug, Default)]
pub(crate) struct FailPoints {
    #[cfg(feature = "failpoints")]
    armed: std::sync::Mutex<Option<FailPointSpec>>,
}

#[cfg(feature = "failpoints")]
impl FailPoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<FailPointSpec>> {
        self.armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn arm(&self, point: FailPoint, action: FailAction) {
        *self.lock() = Some(FailPointSpec(point, action));
    }

    /// Fails here if `point` is armed, and disarms it.
    pub(crate) fn check(&self, point: FailPoint) -> Result<(), Error> {
        let mut armed = self.lock();
        match *armed {
            Some(FailPointSpec(p, action)) if p == point => {
                *armed = None;
                match action {
                    FailAction::Error => Err(Error::Injected(point.as_str())),
                    FailAction::Abort => std::process::abort(),
                }
            }
            _ => Ok(()),
        }
    }

    /// Whether `point` is armed.
    pub(crate) fn armed(&self, point: FailPoint) -> bool {
        self.lock().is_some_and(|spec| spec.0 == point)
    }
}

#[cfg(not(feature = "failpoints"))]
impl FailPoints {
    #[inline(always)]
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)] // compiled out
    pub(crate) fn check(&self, _point: FailPoint) -> Result<(), Error> {
        Ok(())
    }

    #[inline(always)]
    #[allow(clippy::unused_self)] // compiled out
    pub(crate) fn armed(&self, _point: FailPoint) -> bool {
        false
    }
}
