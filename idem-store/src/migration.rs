//! [`Migration`]: one migration of the key table ([migrations](crate#migrations)).

use sha2::{Digest as _, Sha256};

/// One migration of the key table, embedded in the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migration {
    /// Its version in `idem_schema_migrations`: 1, 2, … in the order they apply.
    pub version: i64,
    /// Its file under `migrations/`: `postgres/0005_processing.sql`, say.
    pub file: &'static str,
    /// What it does, in a few words.
    pub description: &'static str,
    /// The SQL, run as one batch of statements in one transaction.
    pub sql: &'static str,
    /// A query that runs, and returns a row, only where this migration's objects are in the
    /// database: how [`crate::check_schema`] finds a schema applied by another tool.
    pub present: &'static str,
    /// The SHA-256 (hexadecimal) of SQL an earlier release of idem applied under this
    /// version, which did the same and is accepted as it is: a migration's text changes only
    /// so, never its effect.
    pub former_checksums: &'static [&'static str],
}

/// `migration!(VERSION, "store/NNNN_name.sql", "what it does", present: "SELECT …")`: the
/// migration in that file of `migrations/`.
macro_rules! migration {
    ($version:literal, $file:literal, $description:literal, present: $present:expr) => {
        $crate::migration::Migration {
            version: $version,
            file: $file,
            description: $description,
            sql: include_str!(concat!("../migrations/", $file)),
            present: $present,
            former_checksums: &[],
        }
    };
}
pub(crate) use migration;

impl Migration {
    /// This migration, accepting databases that recorded one of `checksums` for it.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))] // MySQL's migration 1 only, so far.
    pub(crate) const fn formerly(mut self, checksums: &'static [&'static str]) -> Self {
        self.former_checksums = checksums;
        self
    }

    /// Whether `recorded` is the checksum of this migration's SQL, or of SQL an earlier
    /// release applied in its place.
    pub(crate) fn accepts(&self, recorded: &[u8]) -> bool {
        if recorded == self.checksum() {
            return true;
        }
        let hex: String = recorded.iter().map(|b| format!("{b:02x}")).collect();
        self.former_checksums.contains(&hex.as_str())
    }

    /// SHA-256 of [`Migration::sql`], recorded when the migration is applied: a migration
    /// recorded with another checksum is refused.
    #[must_use]
    pub fn checksum(&self) -> [u8; 32] {
        Sha256::digest(self.sql.as_bytes()).into()
    }
}
