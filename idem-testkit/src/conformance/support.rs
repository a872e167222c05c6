//! What the cases share: the kit's pool settings, connecting, a new migrated database, a
//! key, a stored response.

use std::fmt;
use std::time::Duration;

use idem_store::sqlx::Pool;
use idem_store::staged::Fence;
use idem_store::{Backend, KeyRef, KeyTable, NewRow, StoredResponse, TxSettings};

use crate::harness::TestBackend;

/// The settings the kit's pools use: the harness's
/// ([`harness::settings`](crate::harness::settings)) with a lock timeout long enough for the
/// cases that contend on purpose (concurrent migrations, operators, dispatchers) on a loaded
/// machine.
#[must_use]
pub fn settings() -> TxSettings {
    TxSettings {
        lock_timeout: Duration::from_secs(5),
        ..crate::harness::settings()
    }
}

/// Unwrapping with a message that says what the case was doing.
pub(crate) trait Must<T> {
    /// The value, or a panic naming `what` failed and why.
    fn must(self, what: &str) -> T;
}

impl<T, E: fmt::Debug> Must<T> for Result<T, E> {
    #[track_caller]
    fn must(self, what: &str) -> T {
        match self {
            Ok(value) => value,
            Err(error) => panic!("{what} failed: {error:?}"),
        }
    }
}

impl<T> Must<T> for Option<T> {
    #[track_caller]
    fn must(self, what: &str) -> T {
        match self {
            Some(value) => value,
            None => panic!("{what}: found nothing"),
        }
    }
}

/// A pool on `url` through [`Backend::connect`].
pub(crate) async fn connect<DB: Backend>(url: &str, settings: &TxSettings) -> Pool<DB> {
    idem_store::connect::connect::<DB>(url, 4, settings)
        .await
        .must("Backend::connect on the harness's database")
}

/// A new database from the test harness ([`TestBackend::fresh_url`]), migrated, its key
/// table empty.
pub(crate) async fn fresh<DB: TestBackend>() -> KeyTable<DB> {
    let url = DB::fresh_url().await;
    let table = KeyTable::new(connect::<DB>(&url, &settings()).await);
    table.migrate().await.must("migrating a new database");
    table
}

/// A key of scope `global` and operation `op:v1`.
/// The reservation id the cases reserve staged keys with.
pub(crate) const RESERVATION: i64 = 7;

/// Attempt `attempt` of [`RESERVATION`].
pub(crate) fn at(attempt: i64) -> Fence {
    Fence {
        reservation: RESERVATION,
        attempt,
    }
}

pub(crate) fn key(key: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "global",
        operation: "op:v1",
        key,
    }
}

/// The headers [`put`] stores: a quote, a semicolon and a comment marker in a value, a name
/// twice, and text beyond ASCII.
pub const HEADERS: [(&str, &str); 4] = [
    ("content-type", "application/json"),
    ("location", "/things/'; --"),
    ("set-cookie", "a=1"),
    ("set-cookie", "b=\"é\\\""),
];

/// Stores a completed key through the protocol's primitives, as the runtime does: `begin`
/// without a lock, then [`insert_completed_and_commit`](idem_store::protocol::insert_completed_and_commit). Fingerprint `[7; 32]`,
/// status 201, [`HEADERS`], completed 5 ms after `created_ms`.
pub async fn put<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    expires_ms: i64,
    body: &[u8],
) -> bool {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("Backend::begin without a lock")
        .free()
        .must("Backend::begin without a lock: a transaction");
    let headers = StoredResponse::encode_headers(HEADERS);
    idem_store::protocol::insert_completed_and_commit::<DB>(
        tx,
        NewRow {
            field_digests: None,
            key,
            fingerprint: &[7; 32],
            status: 201,
            headers_json: &headers,
            body,
            created_ms,
            completed_ms: created_ms + 5,
            expires_ms,
            replace_expired: false,
        },
        None,
    )
    .await
    .must("Backend::insert_completed_and_commit")
}
