//! What every command runs with.

use crate::db::Db;
use crate::error::CommandError;

/// What every command runs with.
#[derive(Debug)]
pub struct Context {
    /// The database.
    pub db: Db,
    /// Who acts (`--operator`).
    pub operator: String,
    /// `--read-only`: actions are refused.
    pub read_only: bool,
    /// `--json`: the report is printed as JSON (commands with progress output check it).
    pub json: bool,
}

impl Context {
    /// Refuses `what` when the tool runs `--read-only`.
    ///
    /// # Errors
    /// [`CommandError::REFUSED`] under `--read-only`.
    pub fn writable(&self, what: &str) -> Result<(), CommandError> {
        if self.read_only {
            Err(CommandError::read_only(what))
        } else {
            Ok(())
        }
    }
}
