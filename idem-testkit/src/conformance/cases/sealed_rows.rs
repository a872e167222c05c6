//! Tools on a key table sealed at rest ([`idem_store::Keyring`]): sealed rows listed and
//! acted on without the storage keys, audit entries that never hold what a row holds sealed,
//! operators' responses sealed, and reseals that move every row to the current key.
//!
//! Sealed rows are written through the protocol's primitives with a keyring, as the runtime
//! writes them with `Config::storage_keys`.

use idem_store::sqlx::Pool;
use idem_store::staged::Reservation;
use idem_store::{
    Action, Actor, AuditEntry, AuditFilter, Backend, Cursor, KeyFilter, KeyRef, KeyRow, KeyStatus,
    KeyTable, Keyring, NewRow, Resealed, Sealing, StoreError, StoredResponse,
};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{HEADERS, Must as _, RESERVATION, at, fresh, settings};
use crate::harness::{HOUR, NOW};

/// What no audit entry may hold, nor its hexadecimal: a sealed body's, header's, journal's
/// and request's.
const SECRETS: [&str; 4] = [
    "4242-BODY-SECRET",
    "HEADER-SECRET-77",
    "JOURNAL-SECRET-31",
    "REQUEST-SECRET-19",
];
/// The sealed rows' body.
const BODY: &[u8] = br#"{"card":"4242-BODY-SECRET"}"#;
/// The sealed rows' fingerprint (whose hexadecimal no audit entry may hold either).
const FINGERPRINT: [u8; 32] = [0x5e; 32];
/// The sealed rows' field digests.
const DIGESTS: &[u8] = b"\x02digests";
/// A staged row's journal.
const JOURNAL: &str = r#"{"charge":{"payment":"JOURNAL-SECRET-31"}}"#;
/// A staged row's request.
const REQUEST: &str = r#"{"memo":"REQUEST-SECRET-19"}"#;

/// A keyring of `keys` (an id and the byte its key repeats), the first sealing.
fn ring(keys: &[(&str, u8)]) -> Keyring {
    Keyring::new(keys.iter().map(|(id, byte)| (*id, [*byte; 32]))).must("a keyring")
}

fn key(key: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "tenant:acme",
        operation: "pay:v1",
        key,
    }
}

fn alice() -> Actor {
    Actor::new("alice").reason("CHG-7")
}

/// [`HEADERS`] and a header whose value is secret.
fn headers() -> Vec<(String, String)> {
    (HEADERS.iter().copied())
        .chain([("x-card", "HEADER-SECRET-77")])
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// A completed key stored as the runtime stores it, sealed with `ring` (clear without):
/// status 201, [`headers`], [`BODY`], [`FINGERPRINT`], [`DIGESTS`], expiring at `expires_ms`.
async fn put<DB: Backend>(pool: &Pool<DB>, k: KeyRef<'_>, ring: Option<&Keyring>, expires_ms: i64) {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("Backend::begin")
        .free()
        .must("Backend::begin: a transaction");
    let headers = headers();
    let headers = StoredResponse::encode_headers(headers.iter().map(|(n, v)| (&**n, &**v)));
    let row = NewRow {
        key: k,
        fingerprint: &FINGERPRINT,
        status: 201,
        headers_json: &headers,
        body: BODY,
        created_ms: NOW - HOUR,
        completed_ms: NOW - HOUR + 5,
        expires_ms,
        replace_expired: false,
        field_digests: Some(DIGESTS),
    };
    let stored = idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, ring).await;
    assert!(
        stored.must("Backend::insert_completed_and_commit"),
        "{}",
        k.key
    );
}

/// A staged key reserved and journaled as staged mode does, sealed with `ring`: stuck (its
/// lease ran out a minute before [`NOW`]), [`JOURNAL`] and [`REQUEST`] sealed.
async fn stuck<DB: Backend>(pool: &Pool<DB>, k: KeyRef<'_>, ring: Option<&Keyring>) {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let lease = NOW - 60_000;
    let reservation = Reservation {
        key: k,
        fingerprint: &FINGERPRINT,
        request: REQUEST,
        created_ms: NOW - HOUR,
        expires_ms: NOW + 23 * HOUR,
        locked_until_ms: lease,
        replace_expired: false,
        id: RESERVATION,
        field_digests: Some(DIGESTS),
    };
    let reserved = idem_store::staged::reserve::<DB>(&mut conn, reservation, ring).await;
    assert!(reserved.must("reserve"), "reserving {}", k.key);
    let journaled =
        idem_store::staged::journal::<DB>(&mut conn, k, at(1), "charge", JOURNAL, lease, ring)
            .await;
    assert!(journaled.must("journal"), "journaling {}", k.key);
}

async fn row<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>) -> KeyRow {
    table.get(k, NOW).await.must("get").must("the key's row")
}

fn sealing(key: &str, opened: bool) -> Option<Sealing> {
    Some(Sealing {
        key: key.to_owned(),
        opened,
    })
}

/// Bytes as lowercase hexadecimal.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every entry of the audit trail, newest first, checked to hold no secret of a sealed row,
/// as text or hexadecimal.
async fn audit_without_secrets<DB: Backend>(table: &KeyTable<DB>) -> Vec<AuditEntry> {
    let entries = table.audit(&AuditFilter::new()).await.must("audit");
    for entry in &entries {
        let text = format!("{:?} {:?}", entry.before, entry.after);
        let hexes = SECRETS.iter().map(|s| hex(s.as_bytes()));
        for secret in SECRETS.iter().map(|s| (*s).to_owned()).chain(hexes) {
            assert!(!text.contains(&secret), "audit entry {}: {text}", entry.id);
        }
        assert!(
            !text.contains(&hex(&FINGERPRINT)),
            "audit entry {}: {text}",
            entry.id
        );
    }
    entries
}

/// A sealed row's JSON in the audit trail: the key that sealed it, no fingerprint, the
/// response's status only.
fn assert_sealed_json(json: Option<&serde_json::Value>, key: Option<&str>) {
    let json = json.must("the audit entry's row");
    assert_eq!(json["sealed"].as_str(), key, "{json}");
    assert!(json.get("fingerprint").is_none(), "{json}");
    if let Some(response) = json["response"].as_object() {
        assert_eq!(response.keys().collect::<Vec<_>>(), ["status"], "{json}");
    }
}

/// Without the storage keys, sealed rows are read as sealed (the response's status only,
/// the fingerprint as stored), never an error; listed, expired, released, deleted and
/// swept; their journals and field digests tell that they are sealed. With the keys, every
/// value reads as written; with a keyring lacking their key, as without one.
pub async fn sealed_rows_without_the_keys<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k1 = ring(&[("k1", 1)]);
    let (done, old, held, clear) = (key("done"), key("old"), key("stuck"), key("clear"));
    put(table.pool(), done, Some(&k1), NOW + HOUR).await;
    put(table.pool(), old, Some(&k1), NOW - HOUR).await;
    stuck(table.pool(), held, Some(&k1)).await;
    put(table.pool(), clear, None, NOW + HOUR).await;

    let sealed = row(&table, done).await;
    assert_eq!(sealed.sealed, sealing("k1", false));
    assert_eq!(sealed.status, KeyStatus::Completed);
    let response = sealed.response.as_ref().must("the response's status");
    assert_eq!((response.status, response.headers.len()), (201, 0));
    assert!(response.body.is_empty());
    assert!(sealed.fingerprint.starts_with(b"idem-sealed:v1:k1:"));
    let opened = row(&table.clone().with_keyring(k1.clone()), done).await;
    assert_eq!(opened.sealed, sealing("k1", true));
    assert_eq!(opened.fingerprint, FINGERPRINT);
    let response = opened.response.as_ref().must("the response");
    assert_eq!(
        (response.headers.clone(), response.body.as_ref()),
        (headers(), BODY)
    );
    let elsewhere = table.clone().with_keyring(ring(&[("k0", 9)]));
    assert_eq!(row(&elsewhere, done).await, sealed, "a keyring without k1");
    assert_eq!(row(&table, clear).await.sealed, None);
    assert_eq!(row(&table, held).await.sealed, sealing("k1", false));

    let page = table.list(&KeyFilter::new(), NOW).await.must("list");
    let listed: Vec<_> = page
        .keys
        .iter()
        .map(|k| (k.key.as_str(), k.sealed.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("clear", None),
            ("done", sealing("k1", false)),
            ("old", sealing("k1", false)),
            ("stuck", sealing("k1", false)),
        ]
    );
    let expired = KeyFilter::new().status(KeyStatus::Expired);
    assert_eq!(table.list(&expired, NOW).await.must("list").keys.len(), 1);

    let journal = table.journal(held).await.must("journal").must("a journal");
    assert_eq!(journal.sealed, sealing("k1", false));
    assert!(journal.steps.is_empty() && journal.request.is_none());
    assert_eq!(journal.recovery_point.as_deref(), Some("charge"));
    let journal = (table.clone().with_keyring(k1.clone()).journal(held).await)
        .must("journal")
        .must("a journal");
    assert_eq!(journal.sealed, sealing("k1", true));
    assert_eq!(
        serde_json::Value::Object(journal.steps).to_string(),
        JOURNAL
    );
    assert_eq!(journal.request.must("the request").to_string(), REQUEST);
    match table.field_digests(done).await {
        Err(StoreError::NeedsStorageKeys(why)) => assert!(why.contains("`k1`"), "{why}"),
        other => panic!("field digests without the keys: {other:?}"),
    }
    let digests = table
        .clone()
        .with_keyring(k1.clone())
        .field_digests(done)
        .await;
    assert_eq!(digests.must("field digests").as_deref(), Some(DIGESTS));

    // Every action but an operator's response, and the sweep, without the keys.
    assert_eq!(table.sweep_batch(NOW, 100).await.must("sweep"), 1, "old");
    let released = (table.act(
        held,
        &row(&table, held).await,
        &Action::Release,
        &alice(),
        NOW,
    ))
    .await
    .must("release");
    assert_eq!(
        released.after.must("the row after").sealed,
        sealing("k1", false)
    );
    let expired = (table.act(done, &sealed, &Action::Expire, &alice(), NOW))
        .await
        .must("expire");
    let after = expired.after.must("the row after");
    assert_eq!(
        (after.status, after.sealed),
        (KeyStatus::Expired, sealing("k1", false))
    );
    let seen = row(&table, done).await;
    let deleted = (table.act(done, &seen, &Action::Delete, &alice(), NOW))
        .await
        .must("delete");
    assert_eq!(deleted.after, None);
    let gone = table.delete(held, NOW).await.must("delete").must("the row");
    assert_eq!(gone.sealed, sealing("k1", false));
    assert_eq!(
        table
            .list(&KeyFilter::new(), NOW)
            .await
            .must("list")
            .keys
            .len(),
        1
    );

    let entries = audit_without_secrets(&table).await;
    assert_eq!(entries.len(), 3, "release, expire, delete");
    for entry in &entries {
        assert_sealed_json(entry.before.as_ref(), Some("k1"));
        if entry.action != "delete" {
            assert_sealed_json(entry.after.as_ref(), Some("k1"));
        }
    }
}

/// A sealed value that fails its check under a key of the keyring (here: the keyring's
/// `k1` is not the key that sealed it) is an unreadable row, naming the key and the column,
/// never a value; without the keys, the same row reads as sealed.
pub async fn sealed_values_that_fail_their_check<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let (done, held) = (key("done"), key("stuck"));
    put(table.pool(), done, Some(&ring(&[("k1", 1)])), NOW + HOUR).await;
    stuck(table.pool(), held, Some(&ring(&[("k1", 1)]))).await;
    let wrong = table.clone().with_keyring(ring(&[("k1", 3)]));
    for k in [done, held] {
        match wrong.get(k, NOW).await {
            Err(StoreError::Corrupt(why)) => {
                assert!(why.contains("`k1`") && why.contains(k.key), "{why}");
                assert!(!why.contains("SECRET"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(row(&table, k).await.sealed, sealing("k1", false));
    }
    assert!(matches!(
        wrong.list(&KeyFilter::new(), NOW).await,
        Err(StoreError::Corrupt(_))
    ));
    match wrong.journal(held).await {
        Err(StoreError::Corrupt(why)) => assert!(why.contains("journal"), "{why}"),
        other => panic!("{other:?}"),
    }
    match wrong.field_digests(done).await {
        Err(StoreError::Corrupt(why)) => assert!(why.contains("field digests"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// The headers column of a sealed response holds only a marker naming the key, which nothing
/// authenticates: changed by a byte (or emptied, or NULL), the row is unreadable to the
/// protocol (never a clear response made of the ciphertext), to the tools, and to a reseal,
/// which reports it and leaves it as it is. A clear row whose headers do not read is
/// unreadable too, never replayed without them.
pub async fn a_changed_marker_never_makes_a_sealed_row_clear<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let keys = ring(&[("k2", 2)]);
    let sealed = key("marked");
    put(table.pool(), sealed, Some(&keys), NOW + HOUR).await;
    let with_keys = table.clone().with_keyring(keys.clone());
    let markers = [
        Some("idem-sealed:v1:k2;"),
        Some("idem-sealed:v2:k2:"),
        Some("[]"),
        Some(""),
        None,
    ];
    for marker in markers {
        DB::set_response_headers(table.pool(), sealed, marker)
            .await
            .must("changing the marker");
        let mut conn = table.pool().acquire().await.must("a connection");
        let stored = idem_store::protocol::lookup::<DB>(&mut conn, sealed, Some(&keys))
            .await
            .must("lookup");
        let stored = stored.must("the key's row");
        assert!(
            stored.response.is_none(),
            "{marker:?}: {:?}",
            stored.response
        );
        assert_eq!(
            stored.unopened,
            Some(idem_store::SealError::Tampered("k2".into())),
            "{marker:?}"
        );
        drop(conn);
        match with_keys.get(sealed, NOW).await {
            Err(StoreError::Corrupt(why)) => {
                assert!(why.contains("marked") && !why.contains("SECRET"), "{why}");
            }
            other => panic!("{marker:?}: {other:?}"),
        }
        let (done, _) = reseal_all(&with_keys, None, 10).await;
        assert_eq!(done.resealed, 0, "{marker:?}: {done:?}");
        assert_eq!(done.unreadable.len(), 1, "{marker:?}: {done:?}");
        assert!(done.unreadable[0].contains("marked"), "{done:?}");
    }
    // The marker put back: the row opens as it was written, so nothing rewrote it.
    DB::set_response_headers(table.pool(), sealed, Some("idem-sealed:v1:k2:"))
        .await
        .must("restoring the marker");
    let row = row(&with_keys, sealed).await;
    assert_eq!(row.response.must("the response").body.as_ref(), BODY);
    // A clear row whose headers do not read.
    let clear = key("clear");
    put(table.pool(), clear, None, NOW + HOUR).await;
    DB::corrupt_headers(table.pool(), clear)
        .await
        .must("corrupting the headers");
    let mut conn = table.pool().acquire().await.must("a connection");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, clear, None)
        .await
        .must("lookup");
    let stored = stored.must("the key's row");
    assert!(stored.response.is_none(), "{:?}", stored.response);
    assert_eq!(
        stored.unopened,
        Some(idem_store::SealError::Unreadable("response_headers"))
    );
}

/// An operator's response for a sealed row is written sealed under the current key, and
/// refused without the keys (nothing changed, nothing audited), unless it is a status
/// alone, which has nothing to seal; the audit trail holds neither response.
pub async fn complete_of_a_sealed_row_needs_the_keys<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let (held, bare) = (key("stuck"), key("stuck-too"));
    stuck(table.pool(), held, Some(&ring(&[("k1", 1)]))).await;
    stuck(table.pool(), bare, Some(&ring(&[("k1", 1)]))).await;
    let seen = row(&table, held).await;
    let given = StoredResponse {
        status: 502,
        headers: vec![("x-card".to_owned(), "HEADER-SECRET-77".to_owned())],
        body: bytes::Bytes::from_static(BODY),
    };
    for action in [Action::Complete(given.clone()), Action::Fail(given.clone())] {
        match table.act(held, &seen, &action, &alice(), NOW).await {
            Err(StoreError::NeedsStorageKeys(why)) => {
                assert!(why.contains(action.name()) && why.contains("`k1`"), "{why}");
            }
            other => panic!("{} without the keys: {other:?}", action.name()),
        }
        assert_eq!(
            row(&table, held).await,
            seen,
            "{} changed the row",
            action.name()
        );
    }
    assert!(audit_without_secrets(&table).await.is_empty());
    let status_alone = StoredResponse {
        status: 502,
        ..StoredResponse::default()
    };
    let failed = (table.act(
        bare,
        &row(&table, bare).await,
        &Action::Fail(status_alone.clone()),
        &alice(),
        NOW,
    ))
    .await
    .must("fail with a status alone, without the keys");
    let after = failed.after.must("the row after");
    assert_eq!(
        (after.sealed, after.response),
        (sealing("k1", false), Some(status_alone))
    );
    table.delete(bare, NOW).await.must("delete");

    // k2 seals from now on; k1 still opens the fingerprint.
    let keys = ring(&[("k2", 2), ("k1", 1)]);
    let with_keys = table.clone().with_keyring(keys.clone());
    let seen = row(&with_keys, held).await;
    let acted = (with_keys.act(held, &seen, &Action::Fail(given.clone()), &alice(), NOW))
        .await
        .must("fail with the keys");
    let after = acted.after.must("the row after");
    assert_eq!(
        (after.sealed, after.response),
        (sealing("k2", true), Some(given.clone()))
    );
    let sealed = row(&table, held).await;
    assert_eq!(sealed.sealed, sealing("k2", false));
    assert!(
        sealed
            .response
            .must("the response's status")
            .body
            .is_empty()
    );
    let mut conn = table.pool().acquire().await.must("acquire");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, held, Some(&keys))
        .await
        .must("lookup");
    assert_eq!(stored.must("the key's row").response, Some(given));
    drop(conn);
    let entries = audit_without_secrets(&table).await;
    assert_eq!(entries.len(), 2);
    assert_sealed_json(entries[0].before.as_ref(), Some("k1"));
    assert_sealed_json(entries[0].after.as_ref(), Some("k2"));
}

/// Every batch of a reseal from `after` on, [`Resealed::add`]ed up, and how many batches.
async fn reseal_all<DB: Backend>(
    table: &KeyTable<DB>,
    after: Option<Cursor>,
    batch: u32,
) -> (Resealed, usize) {
    let mut total = Resealed {
        next: after,
        ..Resealed::default()
    };
    let mut batches = 0;
    loop {
        let done = (table.reseal(total.next.as_ref(), batch, &alice(), NOW))
            .await
            .must("reseal");
        total.add(done);
        batches += 1;
        if total.next.is_none() {
            return (total, batches);
        }
    }
}

/// A reseal moves every row to the current key, clear ones too, one audit entry each with no
/// sealed value; leaves rows sealed under a key it lacks as they are; resumes from where it
/// stopped; and, run again, changes nothing. Afterwards the current key alone opens every
/// value, which reads as it was written.
pub async fn reseal_moves_every_row_to_the_current_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let (k0, k1) = (ring(&[("k0", 9)]), ring(&[("k1", 1)]));
    let keys = ring(&[("k2", 2), ("k1", 1)]);
    let [a, b, c, d, e] = ["a-clear", "b-k1", "c-k1-staged", "d-k0", "e-k2"].map(key);
    put(table.pool(), a, None, NOW + HOUR).await;
    put(table.pool(), b, Some(&k1), NOW + HOUR).await;
    stuck(table.pool(), c, Some(&k1)).await;
    put(table.pool(), d, Some(&k0), NOW + HOUR).await;
    put(table.pool(), e, Some(&keys), NOW + HOUR).await;
    let d_before = row(&table, d).await;

    match table.reseal(None, 10, &alice(), NOW).await {
        Err(StoreError::NeedsStorageKeys(_)) => {}
        other => panic!("a reseal without the keys: {other:?}"),
    }
    let with_keys = table.clone().with_keyring(keys.clone());
    match with_keys.reseal(None, 10, &Actor::new(" "), NOW).await {
        Err(StoreError::InvalidArgument(_)) => {}
        other => panic!("a reseal without an operator: {other:?}"),
    }

    // Interrupted after its first batch, then resumed from where it stopped.
    let first = (with_keys.reseal(None, 2, &alice(), NOW))
        .await
        .must("the first batch");
    assert_eq!((first.resealed, first.current, first.skipped()), (2, 0, 0));
    assert_eq!(first.next.as_ref().map(Cursor::key), Some(b));
    let (rest, batches) = reseal_all(&with_keys, first.next.clone(), 2).await;
    assert_eq!(batches, 2);
    assert_eq!((rest.resealed, rest.current), (1, 1));
    assert_eq!(
        rest.unknown_keys.into_iter().collect::<Vec<_>>(),
        [("k0".to_owned(), 1)]
    );
    assert!(rest.unreadable.is_empty(), "{:?}", rest.unreadable);
    // Run again: nothing left to do.
    let (again, batches) = reseal_all(&with_keys, None, 1000).await;
    assert_eq!(
        (again.resealed, again.current, again.skipped(), batches),
        (0, 4, 1, 1)
    );

    let k2 = table.clone().with_keyring(ring(&[("k2", 2)]));
    for k in [a, b, e] {
        let read = row(&k2, k).await;
        assert_eq!(read.sealed, sealing("k2", true), "{}", k.key);
        assert_eq!(read.fingerprint, FINGERPRINT, "{}", k.key);
        let response = read.response.must("the response");
        assert_eq!(
            (response.headers, response.body.as_ref()),
            (headers(), BODY)
        );
        let digests = k2.field_digests(k).await.must("field digests");
        assert_eq!(digests.as_deref(), Some(DIGESTS), "{}", k.key);
        assert_eq!(
            row(&table, k).await.sealed,
            sealing("k2", false),
            "{}",
            k.key
        );
    }
    let staged = row(&k2, c).await;
    assert_eq!(
        (staged.sealed, staged.fingerprint),
        (sealing("k2", true), FINGERPRINT.to_vec())
    );
    let journal = k2.journal(c).await.must("journal").must("a journal");
    assert_eq!(journal.sealed, sealing("k2", true));
    assert_eq!(
        serde_json::Value::Object(journal.steps).to_string(),
        JOURNAL
    );
    assert_eq!(journal.request.must("the request").to_string(), REQUEST);
    // Sealed under a key the reseal lacked: as it was, still k0's.
    assert_eq!(row(&table, d).await, d_before);
    let opened = row(&table.clone().with_keyring(k0), d).await;
    assert_eq!(opened.response.must("the response").body.as_ref(), BODY);

    let entries = audit_without_secrets(&table).await;
    let mut resealed: Vec<_> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.action.as_str()))
        .collect();
    resealed.sort_unstable();
    assert_eq!(
        resealed,
        [
            ("a-clear", "reseal"),
            ("b-k1", "reseal"),
            ("c-k1-staged", "reseal")
        ]
    );
    for entry in &entries {
        assert_eq!(
            (entry.operator.as_str(), entry.reason.as_deref()),
            ("alice", Some("CHG-7"))
        );
        let was = (entry.key != "a-clear").then_some("k1");
        assert_sealed_json(entry.before.as_ref(), was);
        assert_sealed_json(entry.after.as_ref(), Some("k2"));
    }
}

/// `Outbox::reseal` and `Inbox::reseal`: every payload and body moved to the current key
/// (clear ones sealed), those under a key not given left as they are and counted, in
/// batches; afterwards the current key alone opens them, as they were enqueued.
pub async fn reseal_moves_messages_and_events_to_the_current_key<DB: ConformanceSql>() {
    use idem_store::{Delivery, Inbox, InboxStatus, Outbox, OutboxMessage, enqueue};
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let (k0, k1) = (ring(&[("k0", 9)]), ring(&[("k1", 1)]));
    let keys = ring(&[("k2", 2), ("k1", 1)]);
    let sealers = [None, Some(&k1), Some(&k0), Some(&keys), Some(&k1)];
    let mut tx = pool.begin().await.must("begin");
    for (i, sealer) in sealers.iter().enumerate() {
        let payload = serde_json::json!({ "card": SECRETS[0], "n": i });
        let message = OutboxMessage::new(format!("m-{i}"), "payment.made", payload);
        assert!(
            enqueue(&mut tx, &message, NOW, *sealer)
                .await
                .must("enqueue")
        );
    }
    tx.commit().await.must("commit");
    let mut conn = pool.acquire().await.must("acquire");
    for (i, sealer) in sealers.iter().enumerate() {
        let (event, body) = (
            format!("evt-{i}"),
            format!(r#"{{"n":{i},"s":"{}"}}"#, SECRETS[1]),
        );
        let delivery = Delivery {
            source: "provider_event:v1",
            event_id: &event,
            reason: "no payment names it",
            body: &body,
        };
        Inbox::<DB>::note(&mut conn, delivery, InboxStatus::Waiting, NOW, *sealer)
            .await
            .must("note");
    }
    drop(conn);

    let outbox = Outbox::new(pool.clone());
    assert!(matches!(
        outbox.reseal(0, 2).await,
        Err(StoreError::NeedsStorageKeys(_))
    ));
    let outbox = outbox.with_keyring(keys.clone());
    let inbox = Inbox::new(pool.clone()).with_keyring(keys.clone());
    let (mut messages, mut events) = (
        idem_store::ResealedRows::default(),
        idem_store::ResealedRows::default(),
    );
    loop {
        messages.add(
            outbox
                .reseal(messages.next.unwrap_or(0), 2)
                .await
                .must("outbox reseal"),
        );
        if messages.next.is_none() {
            break;
        }
    }
    loop {
        events.add(
            inbox
                .reseal(events.next.unwrap_or(0), 2)
                .await
                .must("inbox reseal"),
        );
        if events.next.is_none() {
            break;
        }
    }
    for done in [&messages, &events] {
        assert_eq!((done.resealed, done.current), (3, 1), "{done:?}");
        assert_eq!(done.unknown_keys.get("k0"), Some(&1), "{done:?}");
        assert!(done.unreadable.is_empty(), "{done:?}");
    }
    // Again: nothing left to do but what k0 sealed.
    let again = outbox.reseal(0, 100).await.must("outbox reseal again");
    assert_eq!((again.resealed, again.current), (0, 4));

    // The current key alone opens every one but k0's, as enqueued.
    let k2 = ring(&[("k2", 2)]);
    let outbox = Outbox::new(pool.clone()).with_keyring(k2.clone());
    let inbox = Inbox::new(pool.clone()).with_keyring(k2);
    for (i, sealer) in sealers.iter().enumerate() {
        let message = outbox
            .get(&format!("m-{i}"))
            .await
            .must("get")
            .must("the message");
        let event = inbox.get(&format!("evt-{i}")).await.must("get");
        let sealing = (
            message.sealed.clone().must("sealed"),
            event[0].sealed.clone().must("sealed"),
        );
        if sealer.is_some_and(|s| s.current() == "k0") {
            assert_eq!(
                sealing.0,
                Sealing {
                    key: "k0".into(),
                    opened: false
                }
            );
            assert_eq!(
                sealing.1,
                Sealing {
                    key: "k0".into(),
                    opened: false
                }
            );
            continue;
        }
        assert_eq!(
            sealing.0,
            Sealing {
                key: "k2".into(),
                opened: true
            }
        );
        assert_eq!(
            sealing.1,
            Sealing {
                key: "k2".into(),
                opened: true
            }
        );
        assert_eq!(message.payload["n"], i);
        assert_eq!(
            event[0].body,
            format!(r#"{{"n":{i},"s":"{}"}}"#, SECRETS[1])
        );
    }
}
