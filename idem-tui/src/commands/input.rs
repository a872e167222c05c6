//! What a command reads besides the database: a body from a file or stdin.

use std::io::Read as _;
use std::path::Path;

use crate::error::CommandError;

/// The body from `path`, or from stdin for `-`.
pub(super) fn read_body(path: &Path) -> Result<Vec<u8>, CommandError> {
    if path == Path::new("-") {
        let mut body = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut body)
            .map_err(|e| CommandError::error(format!("cannot read the body from stdin: {e}")))?;
        Ok(body)
    } else {
        std::fs::read(path).map_err(|e| {
            CommandError::error(format!("cannot read the body from {}: {e}", path.display()))
        })
    }
}
