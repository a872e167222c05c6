//! [`Migration`]: one migration of the key table.

use sha2::{Digest as _, Sha256};

/// One migration of the key table, embedded in the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migration {
    /// Its version in `idem_schema_migrations`: 1, 2, … in the order they apply.
    pub version: i64,
    /// What it does, in a few words.
    pub description: &'static str,
    /// The SQL, run as one batch of statements in one transaction.
    pub sql: &'static str,
}

impl Migration {
    pub(crate) const fn new(version: i64, description: &'static str, sql: &'static str) -> Self {
        Self {
            version,
            description,
            sql,
        }
    }

    /// SHA-256 of [`Migration::sql`], recorded when the migration is applied: a migration
    /// recorded with another checksum is refused.
    #[must_use]
    pub fn checksum(&self) -> [u8; 32] {
        Sha256::digest(self.sql.as_bytes()).into()
    }
}
