//! `operations`: every operation seen in the key table or registered, with its counts and,
//! when registered, its settings.

use super::Context;
use crate::error::Failure;
use crate::output::Report;

/// Every operation, with its counts and registration.
pub(super) async fn operations(context: &Context) -> Result<Report, Failure> {
    let _ = context;
    Err(Failure::error("operations: not available yet"))
}
