#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]
// Without a backend there is nothing to run the statements on.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code, unused_macros, unused_imports)
)]

mod backend;
pub mod connect;
mod error;
mod glue;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod hosts;
mod inbox;
mod key;
mod list;
mod migrate;
mod migration;
#[cfg(feature = "mysql")]
mod mysql;
mod operations;
mod operator;
mod outbox;
pub mod pooler;
#[cfg(feature = "postgres")]
mod postgres;
pub mod protocol;
mod reseal;
mod row;
mod seal;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[doc(hidden)]
pub mod staged;
mod table;

pub use crate::backend::{Backend, Dialect};
pub use crate::error::{Hazard, NotApplicable, StoreError};
pub use crate::inbox::{Delivery, Inbox, InboxEvent, InboxStatus};
pub use crate::key::KeyRef;
pub use crate::list::{Counts, Cursor, KeyFilter, Page, StatusCounts};
pub use crate::migrate::{MIGRATION_LOCK_ID, check_schema, migrate};
pub use crate::migration::Migration;
pub use crate::operations::{OperationInfo, Registration};
pub use crate::operator::{Acted, Action, Actor, AuditEntry, AuditFilter, Journal};
pub use crate::outbox::{
    Claimed, Outbox, OutboxCounts, OutboxMessage, OutboxRow, OutboxStatus, enqueue,
};
// The vocabulary of the protocol's primitives: the runtime's (see `Backend`).
#[doc(hidden)]
pub use crate::protocol::{Begun, Failure, IDLE_PING_AFTER, KeyLock, NewRow, TxSettings};
pub use crate::reseal::{Resealed, ResealedRows};
#[doc(hidden)]
pub use crate::row::StoredKey;
pub use crate::row::{KeyRow, KeyStatus, StoredResponse, StoredStatus};
pub use crate::seal::{Keyring, KeyringError, SealError, Sealed, Sealing, newest_sealed};
#[doc(hidden)]
pub use crate::sql::Arg;

/// The decoding of a key row's columns, for the fuzz targets (`fuzz/` in the repository) and
/// the property tests. Not a public API: it changes between versions.
#[doc(hidden)]
pub mod __fuzz {
    use crate::{KeyRow, SealError, StoreError, StoredResponse};

    /// The stored response as the protocol replays it and tools read it: `Err` names the
    /// column that is unreadable.
    ///
    /// # Errors
    /// A status outside `u16`, or headers that are not a JSON array of `[name, value]` pairs.
    pub fn strict(
        status: i32,
        headers: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<StoredResponse, SealError> {
        StoredResponse::strict(status, headers, body)
    }

    /// A row of `(global, op:v1, k)` with these columns, as tools read it at `now_ms`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for an unknown status or an unreadable response.
    pub fn row(
        status: &str,
        response_status: Option<i32>,
        response_headers: Option<String>,
        response_body: Option<Vec<u8>>,
        expires_at_ms: i64,
        locked_until_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<KeyRow, StoreError> {
        crate::list::RawRow {
            scope: "global".to_owned(),
            operation: "op:v1".to_owned(),
            key: "k".to_owned(),
            fingerprint: Vec::new(),
            status: status.to_owned(),
            response_status,
            response_headers,
            response_body,
            created_at_ms: 0,
            completed_at_ms: None,
            expires_at_ms,
            locked_until_ms,
            attempt: 0,
            recovery_point: None,
        }
        .into_row(now_ms, None)
    }
}
pub use crate::table::KeyTable;

/// Re-exported: the pools and transactions in this crate's signatures are sqlx 0.8's.
pub use sqlx;
