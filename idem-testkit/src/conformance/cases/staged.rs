//! Staged mode's statements ([`idem_store::Backend`]): reservation, leases and
//! takeovers, the journal, finishing and releasing, every write fenced by its reservation and
//! its attempt.

use idem_store::sqlx::{Connection as _, Pool};
use idem_store::staged::{Ending, Fence, Lease, Reservation, StuckKey};
use idem_store::{
    Backend, KeyRef, KeyStatus, Outbox, OutboxMessage, StoredResponse, StoredStatus, enqueue,
};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, RESERVATION, at, fresh, key, put};
use crate::harness::{HOUR, NOW};

/// The journal [`staged_key`] records: two steps.
pub(crate) const JOURNAL: &str = r#"{"reserve":{"hold":"h-1"},"charge":{"payment":"p-9"}}"#;
/// The request [`staged_key`] reserves with.
pub(crate) const REQUEST: &str = r#"{"amount":5,"currency":"EUR"}"#;

fn reservation(key: KeyRef<'_>, created_ms: i64, locked_until_ms: i64) -> Reservation<'_> {
    Reservation {
        key,
        fingerprint: &[0x0a, 0x0b],
        request: REQUEST,
        created_ms,
        expires_ms: created_ms + 24 * HOUR,
        locked_until_ms,
        replace_expired: false,
        id: RESERVATION,
        field_digests: None,
    }
}

/// A staged key as staged mode leaves it mid-way, through its own statements: reserved at
/// `created_ms` (expiring a day later), taken over until its attempt is `attempt`, then step
/// `charge` journaled ([`JOURNAL`]) with the lease until `lease_ms`.
pub(crate) async fn staged_key<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    lease_ms: i64,
    attempt: i64,
) {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let reserved = idem_store::staged::reserve::<DB>(
        &mut conn,
        reservation(key, created_ms, created_ms),
        None,
    )
    .await
    .must("reserve");
    assert!(reserved, "reserving the free key {}", key.key);
    for seen in 1..attempt {
        let lease = idem_store::staged::take_over::<DB>(
            &mut conn,
            key,
            at(seen),
            created_ms,
            created_ms,
            None,
        )
        .await
        .must("take_over")
        .must("taking over an expired lease");
        assert_eq!(
            lease.fence.attempt,
            seen + 1,
            "the attempt after a takeover"
        );
    }
    let journaled = idem_store::staged::journal::<DB>(
        &mut conn,
        key,
        at(attempt),
        "charge",
        JOURNAL,
        lease_ms,
        None,
    )
    .await
    .must("journal");
    assert!(journaled, "journaling the running attempt");
}

/// [`reserve`](idem_store::staged::reserve) inserts the key as processing, attempt 1, with its
/// lease, fingerprint and request; a second reservation (replacing expired rows or not)
/// finds the key taken and changes nothing.
pub async fn reserve_once<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let k = key("k");
    let first = reservation(k, NOW, NOW + 30_000);
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, first, None)
            .await
            .must("reserve"),
        "reserving a free key"
    );
    let row = table.get(k, NOW).await.must("get").must("the reserved key");
    assert_eq!(row.status, KeyStatus::Processing, "status");
    assert_eq!(row.attempt, 1, "attempt");
    assert_eq!(row.locked_until_ms, Some(NOW + 30_000), "lease");
    assert_eq!(row.created_at_ms, NOW, "created_at");
    assert_eq!(row.expires_at_ms, NOW + 24 * HOUR, "expires_at");
    assert_eq!(row.fingerprint, [0x0a, 0x0b], "fingerprint");
    assert_eq!(
        (row.response.clone(), row.completed_at_ms),
        (None, None),
        "no response"
    );
    assert_eq!(row.recovery_point, None, "no recovery point");
    assert_eq!(row.reservation, Some(RESERVATION), "the reservation");
    let listed = table
        .list(&idem_store::KeyFilter::new(), NOW)
        .await
        .must("list");
    assert_eq!(
        listed.keys,
        std::slice::from_ref(&row),
        "the listed row, its reservation too"
    );
    let journal = table
        .journal(k)
        .await
        .must("journal")
        .must("the reserved key's journal");
    assert!(
        journal.steps.is_empty(),
        "no steps yet: {:?}",
        journal.steps
    );
    assert_eq!(
        journal.request,
        Some(serde_json::json!({"amount": 5, "currency": "EUR"})),
        "the request it was reserved with"
    );

    for replace_expired in [false, true] {
        let again = Reservation {
            fingerprint: &[1; 32],
            request: "{}",
            created_ms: NOW + 1,
            locked_until_ms: NOW + 60_000,
            replace_expired,
            id: RESERVATION,
            ..first
        };
        assert!(
            !idem_store::staged::reserve::<DB>(&mut conn, again, None)
                .await
                .must("reserve again"),
            "a second reservation (replace_expired {replace_expired}) took a reserved key"
        );
    }
    assert_eq!(
        table.get(k, NOW).await.must("get").as_ref(),
        Some(&row),
        "the row after refused reservations"
    );
}

/// A reservation replacing expired rows takes over a completed row that had expired by its
/// start as a new attempt (one more than the row's), its response, journal and recovery point
/// gone; a row expiring later stays, and so does a processing row whatever its `expires_at`
/// (a key that is not final never expires).
pub async fn reserve_replacing_an_expired_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let completed = key("completed");
    assert!(put(pool, completed, NOW - 2 * HOUR, NOW - HOUR, b"old").await);
    let processing = key("processing");
    staged_key(pool, processing, NOW - 30 * HOUR, NOW - 10 * HOUR, 3).await;
    let live = key("live");
    assert!(put(pool, live, NOW - HOUR, NOW + 1, b"live").await);

    let replacing = |key| Reservation {
        fingerprint: &[5; 32],
        request: "{\"again\":true}",
        created_ms: NOW,
        expires_ms: NOW + HOUR,
        locked_until_ms: NOW + 30_000,
        replace_expired: true,
        id: RESERVATION,
        key,
        field_digests: None,
    };
    assert!(
        !idem_store::staged::reserve::<DB>(
            &mut conn,
            Reservation {
                created_ms: NOW - HOUR - 1,
                ..replacing(completed)
            },
            None
        )
        .await
        .must("reserve"),
        "a reservation that began before the row expired replaced it"
    );
    assert!(
        !idem_store::staged::reserve::<DB>(&mut conn, replacing(live), None)
            .await
            .must("reserve"),
        "a reservation replaced a row that has not expired"
    );
    let unfinished = table
        .get(processing, NOW)
        .await
        .must("get")
        .must("the processing row");
    assert_eq!(unfinished.status, KeyStatus::Stuck, "processing: status");
    assert!(
        !idem_store::staged::reserve::<DB>(&mut conn, replacing(processing), None)
            .await
            .must("reserve"),
        "a reservation replaced a processing row past its expires_at"
    );
    assert_eq!(
        table.get(processing, NOW).await.must("get"),
        Some(unfinished),
        "the processing row after a refused replacement"
    );
    {
        let (k, attempt) = (completed, 1);
        assert!(
            idem_store::staged::reserve::<DB>(&mut conn, replacing(k), None)
                .await
                .must("reserve"),
            "a reservation did not replace the expired row of {}",
            k.key
        );
        let row = table.get(k, NOW).await.must("get").must("the replaced row");
        assert_eq!(row.status, KeyStatus::Processing, "{}: status", k.key);
        assert_eq!(row.attempt, attempt, "{}: attempt", k.key);
        assert_eq!(row.fingerprint, [5; 32], "{}: fingerprint", k.key);
        assert_eq!(row.created_at_ms, NOW, "{}: created_at", k.key);
        assert_eq!(row.expires_at_ms, NOW + HOUR, "{}: expires_at", k.key);
        assert_eq!(row.locked_until_ms, Some(NOW + 30_000), "{}: lease", k.key);
        assert_eq!(row.response, None, "{}: response", k.key);
        assert_eq!(row.completed_at_ms, None, "{}: completed_at", k.key);
        assert_eq!(row.recovery_point, None, "{}: recovery point", k.key);
        let journal = table.journal(k).await.must("journal").must("the journal");
        assert!(
            journal.steps.is_empty(),
            "{}: journal {:?}",
            k.key,
            journal.steps
        );
        assert_eq!(
            journal.request,
            Some(serde_json::json!({"again": true})),
            "{}: request",
            k.key
        );
    }
}

/// [`take_over`](idem_store::staged::take_over) takes a key whose lease ran out (at or before
/// now) and whose attempt is the one seen, as the next attempt, returning the journal,
/// request and fingerprint; a lease still running, a stale attempt number or a renewed
/// lease refuse it. [`renew`](idem_store::staged::renew) works for the current attempt only.
pub async fn lease_takeover_and_renewal<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let k = key("k");
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, reservation(k, NOW, NOW + 30_000), None)
            .await
            .must("reserve")
    );
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW + 29_999, NOW + 60_000, None)
            .await
            .must("take_over"),
        None,
        "a takeover while the lease runs"
    );
    let lease =
        idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW + 30_000, NOW + 60_000, None)
            .await
            .must("take_over");
    assert_eq!(
        lease,
        Some(Lease {
            fence: at(2),
            journal: None,
            request: Some(REQUEST.to_owned()),
            fingerprint: vec![0x0a, 0x0b],
        }),
        "a takeover once the lease ran out"
    );
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW + 90_000, NOW + 120_000, None)
            .await
            .must("take_over"),
        None,
        "a takeover with a stale attempt number"
    );
    assert!(
        !idem_store::staged::renew::<DB>(&mut conn, k, at(1), NOW + 120_000)
            .await
            .must("renew"),
        "the fenced-out attempt renewed its lease"
    );
    assert!(
        idem_store::staged::renew::<DB>(&mut conn, k, at(2), NOW + 120_000)
            .await
            .must("renew"),
        "the running attempt could not renew its lease"
    );
    let row = table.get(k, NOW).await.must("get").must("the key");
    assert_eq!(
        (row.attempt, row.locked_until_ms),
        (2, Some(NOW + 120_000)),
        "attempt and lease"
    );
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, k, at(2), NOW + 90_000, NOW + 150_000, None)
            .await
            .must("take_over"),
        None,
        "a takeover of a renewed lease"
    );
    assert!(
        idem_store::staged::journal::<DB>(
            &mut conn,
            k,
            at(2),
            "charge",
            JOURNAL,
            NOW + 130_000,
            None
        )
        .await
        .must("journal"),
        "journaling the running attempt"
    );
    let lease = idem_store::staged::take_over::<DB>(
        &mut conn,
        k,
        at(2),
        NOW + 130_000,
        NOW + 200_000,
        None,
    )
    .await
    .must("take_over")
    .must("a takeover after the journaled lease ran out");
    assert_eq!(lease.fence.attempt, 3, "attempt");
    assert_eq!(
        lease.journal.as_deref(),
        Some(JOURNAL),
        "the journal a takeover resumes from"
    );
}

/// [`journal`](idem_store::staged::journal) records the recovery point and the journal and
/// renews the lease, for the running attempt only; [`finish`](idem_store::staged::finish)
/// completes the key with its response, for the running attempt only, after which no write
/// of any attempt applies.
pub async fn journal_and_finish_are_fenced<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let k = key("k");
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, reservation(k, NOW, NOW + 30_000), None)
            .await
            .must("reserve")
    );
    let first_step = r#"{"reserve":{"hold":"h-1"}}"#;
    assert!(
        idem_store::staged::journal::<DB>(
            &mut conn,
            k,
            at(1),
            "reserve",
            first_step,
            NOW + 40_000,
            None
        )
        .await
        .must("journal"),
        "journaling the running attempt"
    );
    let row = table.get(k, NOW).await.must("get").must("the key");
    assert_eq!(
        row.recovery_point.as_deref(),
        Some("reserve"),
        "recovery point"
    );
    assert_eq!(
        row.locked_until_ms,
        Some(NOW + 40_000),
        "the lease a journal renews"
    );
    let journal = table.journal(k).await.must("journal").must("the journal");
    assert_eq!(
        journal.recovery_point.as_deref(),
        Some("reserve"),
        "journal's recovery point"
    );
    assert_eq!(
        serde_json::Value::Object(journal.steps),
        serde_json::json!({"reserve": {"hold": "h-1"}}),
        "journal's steps"
    );

    // A takeover fences attempt 1 out.
    let lease =
        idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW + 40_000, NOW + 70_000, None)
            .await
            .must("take_over")
            .must("a takeover once the lease ran out");
    assert_eq!(
        lease.journal.as_deref(),
        Some(first_step),
        "the journal taken over"
    );
    assert!(
        !idem_store::staged::journal::<DB>(
            &mut conn,
            k,
            at(1),
            "charge",
            JOURNAL,
            NOW + 99_000,
            None
        )
        .await
        .must("journal"),
        "the fenced-out attempt journaled"
    );
    let ending = Ending {
        status: 201,
        headers_json: &StoredResponse::encode_headers([("location", "/orders/7")]),
        body: b"\x00{\"id\":7}\xff",
        completed_ms: NOW + 50_000,
        expires_ms: NOW + 50_000 + 24 * HOUR,
    };
    assert!(
        !idem_store::staged::finish::<DB>(&mut conn, k, at(1), ending, None)
            .await
            .must("finish"),
        "the fenced-out attempt finished the key"
    );
    let row = table.get(k, NOW).await.must("get").must("the key");
    assert_eq!(
        row.recovery_point.as_deref(),
        Some("reserve"),
        "the fenced-out journal"
    );
    assert_eq!(row.status, KeyStatus::Processing, "the fenced-out finish");

    assert!(
        idem_store::staged::finish::<DB>(&mut conn, k, at(2), ending, None)
            .await
            .must("finish"),
        "finishing the key"
    );
    let row = table.get(k, NOW).await.must("get").must("the key");
    assert_eq!(row.status, KeyStatus::Completed, "status after finishing");
    assert_eq!(row.completed_at_ms, Some(NOW + 50_000), "completed_at");
    assert_eq!(row.locked_until_ms, None, "lease after finishing");
    assert_eq!(row.attempt, 2, "attempt after finishing");
    assert_eq!(
        row.expires_at_ms,
        NOW + 50_000 + 24 * HOUR,
        "expiry after finishing: the ending's"
    );
    let expected = StoredResponse {
        status: 201,
        headers: vec![("location".to_owned(), "/orders/7".to_owned())],
        body: bytes::Bytes::from_static(b"\x00{\"id\":7}\xff"),
    };
    assert_eq!(
        row.response.as_ref(),
        Some(&expected),
        "the finished response"
    );
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the key");
    assert_eq!(
        stored.status,
        StoredStatus::Completed,
        "lookup status after finishing"
    );
    assert_eq!(
        stored.response,
        Some(expected),
        "the response lookup replays"
    );

    // A completed key takes no staged write at all.
    assert!(
        !idem_store::staged::journal::<DB>(&mut conn, k, at(2), "late", "{}", NOW + HOUR, None)
            .await
            .must("journal"),
        "journal after finish"
    );
    assert!(
        !idem_store::staged::renew::<DB>(&mut conn, k, at(2), NOW + HOUR)
            .await
            .must("renew"),
        "renew after finish"
    );
    assert!(
        !idem_store::staged::release::<DB>(&mut conn, k, at(2), NOW)
            .await
            .must("release"),
        "release after finish"
    );
    assert!(
        !idem_store::staged::finish::<DB>(&mut conn, k, at(2), ending, None)
            .await
            .must("finish"),
        "finish after finish"
    );
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, k, at(2), NOW + HOUR, NOW + 2 * HOUR, None)
            .await
            .must("take_over"),
        None,
        "take_over after finish"
    );
    assert_eq!(
        table.get(k, NOW).await.must("get").as_ref(),
        Some(&row),
        "the finished row"
    );
}

/// A key an operator deleted while its attempt ran, then reserved again by a new request:
/// the new row starts again at attempt 1, and every write of the deleted reservation's
/// attempt 1 — journal, renew, release, finish, takeover — finds another reservation and
/// changes nothing. The new reservation's own attempt writes as usual, and its id is what a
/// lookup reads.
pub async fn a_deleted_reservation_writes_nothing_into_the_next<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let k = key("k");
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, reservation(k, NOW, NOW + 30_000), None)
            .await
            .must("reserve")
    );
    let row = table.get(k, NOW).await.must("get").must("the key");
    let forced = idem_store::Actor::new("ops").force();
    table
        .act(k, &row, &idem_store::Action::Delete, &forced, NOW + 1)
        .await
        .must("a forced delete of a running key");
    let next = Reservation {
        id: RESERVATION + 1,
        fingerprint: &[0x0c],
        ..reservation(k, NOW + 2, NOW + 30_000)
    };
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, next, None)
            .await
            .must("reserve again")
    );
    let new = Fence {
        reservation: RESERVATION + 1,
        attempt: 1,
    };
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the key");
    assert_eq!(stored.fence, new, "the new reservation's fence");

    let old = at(1);
    assert!(
        !idem_store::staged::journal::<DB>(&mut conn, k, old, "charge", JOURNAL, NOW + HOUR, None)
            .await
            .must("journal"),
        "the deleted reservation's journal"
    );
    assert!(
        !idem_store::staged::renew::<DB>(&mut conn, k, old, NOW + HOUR)
            .await
            .must("renew"),
        "the deleted reservation's renew"
    );
    assert!(
        !idem_store::staged::release::<DB>(&mut conn, k, old, NOW + 3)
            .await
            .must("release"),
        "the deleted reservation's release"
    );
    let ending = Ending {
        status: 201,
        headers_json: "[]",
        body: b"old",
        completed_ms: NOW + 4,
        expires_ms: NOW + HOUR,
    };
    assert!(
        !idem_store::staged::finish::<DB>(&mut conn, k, old, ending, None)
            .await
            .must("finish"),
        "the deleted reservation's finish"
    );
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, k, old, NOW + HOUR, NOW + 2 * HOUR, None)
            .await
            .must("take_over"),
        None,
        "a takeover of the deleted reservation"
    );
    let row = table.get(k, NOW + 5).await.must("get").must("the key");
    assert_eq!(
        row.status,
        KeyStatus::Processing,
        "the new reservation's status"
    );
    assert_eq!(row.fingerprint, [0x0c], "the new reservation's fingerprint");
    assert_eq!(
        row.reservation,
        Some(RESERVATION + 1),
        "the new reservation"
    );
    assert_eq!(row.recovery_point, None, "the new reservation's journal");
    assert_eq!(
        row.locked_until_ms,
        Some(NOW + 30_000),
        "the new reservation's lease"
    );

    let ending = Ending {
        body: b"new",
        ..ending
    };
    assert!(
        idem_store::staged::finish::<DB>(&mut conn, k, new, ending, None)
            .await
            .must("finish"),
        "the new reservation finishes"
    );
    let row = table.get(k, NOW + 5).await.must("get").must("the key");
    assert_eq!(
        row.reservation,
        Some(RESERVATION + 1),
        "a completed staged key keeps its reservation"
    );
    assert_eq!(
        row.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"new")),
        "the new reservation's response"
    );
}

/// [`release`](idem_store::staged::release) ends the running attempt's lease at once, leaving
/// the key processing — stuck from then on — for the next attempt to take over; a stale
/// attempt cannot release it.
pub async fn release_hands_the_key_on<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let k = key("k");
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, reservation(k, NOW, NOW + 30_000), None)
            .await
            .must("reserve")
    );
    assert!(
        !idem_store::staged::release::<DB>(&mut conn, k, at(2), NOW)
            .await
            .must("release"),
        "an attempt that never ran released the key"
    );
    assert!(
        idem_store::staged::release::<DB>(&mut conn, k, at(1), NOW + 1_000)
            .await
            .must("release"),
        "the running attempt could not release"
    );
    let row = table.get(k, NOW + 1_000).await.must("get").must("the key");
    assert_eq!(row.status, KeyStatus::Stuck, "status after release");
    assert_eq!(
        row.locked_until_ms,
        Some(NOW + 1_000),
        "lease after release"
    );
    assert_eq!(row.attempt, 1, "attempt after release");
    let lease =
        idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW + 1_000, NOW + 31_000, None)
            .await
            .must("take_over")
            .must("taking over a released key");
    assert_eq!(lease.fence.attempt, 2, "the next attempt");
    assert!(
        !idem_store::staged::release::<DB>(&mut conn, k, at(1), NOW + 2_000)
            .await
            .must("release"),
        "the fenced-out attempt released"
    );
    assert_eq!(
        table
            .get(k, NOW + 2_000)
            .await
            .must("get")
            .map(|r| r.status),
        Some(KeyStatus::Processing),
        "the new attempt's key"
    );
}

/// [`hold`](idem_store::staged::hold): where the backend [`HOLDS`](idem_store::staged::holds),
/// one session at a time holds a key's attempt, and a session holds one attempt at a time
/// (a new hold or probe lets go of the old one); [`owner_gone`](idem_store::staged::owner_gone)
/// answers `false` while the attempt is held and `true` once its owner let go or its
/// connection ended (a process killed with its attempt running), holding nothing itself;
/// the next attempt's hold and the key's transaction lock are other locks. Elsewhere holds
/// take nothing and `owner_gone` is always `false`.
pub async fn holds_end_with_their_session<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let namespace = {
        let mut conn = pool.acquire().await.must("acquiring a connection");
        idem_store::connect::namespace::<DB>(&mut conn)
            .await
            .must("namespace")
    };
    let ns = namespace.as_str();
    let (k, other) = (key("k"), key("other"));
    let mut owner = pool.acquire().await.must("acquiring a connection");
    let mut prober = pool.acquire().await.must("acquiring a connection");
    let mut third = pool.acquire().await.must("acquiring a connection");
    assert!(
        idem_store::staged::hold::<DB>(&mut owner, ns, k, at(1))
            .await
            .must("hold"),
        "holding a free attempt"
    );
    if !idem_store::staged::holds::<DB>() {
        assert!(
            idem_store::staged::hold::<DB>(&mut prober, ns, k, at(1))
                .await
                .must("hold"),
            "a backend without holds refused one"
        );
        assert!(
            !idem_store::staged::owner_gone::<DB>(&mut prober, ns, k, at(7))
                .await
                .must("owner_gone"),
            "a backend without holds proved an owner gone"
        );
        return;
    }
    assert!(
        !idem_store::staged::hold::<DB>(&mut prober, ns, k, at(1))
            .await
            .must("hold"),
        "a second session held a held attempt"
    );
    assert!(
        !idem_store::staged::owner_gone::<DB>(&mut prober, ns, k, at(1))
            .await
            .must("owner_gone"),
        "the owner of a held attempt was found gone"
    );
    assert!(
        idem_store::staged::hold::<DB>(&mut prober, ns, k, at(2))
            .await
            .must("hold"),
        "the next attempt's hold waited for the attempt it replaces"
    );
    // The key's transaction lock (the atomic protocol's) is another lock.
    let lock = idem_store::KeyLock {
        namespace: ns,
        key: k,
        expired_by_ms: None,
    };
    assert!(
        !DB::key_lock_taken(&mut third, lock)
            .await
            .must("key_lock_taken"),
        "a hold took the key's transaction lock"
    );
    assert!(
        !idem_store::staged::hold::<DB>(&mut third, ns, k, at(2))
            .await
            .must("hold"),
        "attempt 2 held twice"
    );
    // One attempt per session: holding another lets go of attempt 2.
    assert!(
        idem_store::staged::hold::<DB>(&mut prober, ns, other, at(1))
            .await
            .must("hold"),
        "another key's hold was refused"
    );
    assert!(
        idem_store::staged::hold::<DB>(&mut third, ns, k, at(2))
            .await
            .must("hold"),
        "a session kept its earlier hold"
    );
    assert!(
        idem_store::staged::let_go::<DB>(&mut owner, ns, k, at(1))
            .await
            .must("let_go")
    );
    assert!(
        !idem_store::staged::let_go::<DB>(&mut owner, ns, k, at(1))
            .await
            .must("let_go"),
        "letting go twice"
    );
    assert!(
        idem_store::staged::owner_gone::<DB>(&mut prober, ns, k, at(1))
            .await
            .must("owner_gone"),
        "an attempt let go still had an owner"
    );
    // The probe held nothing after it, not even the prober's earlier hold.
    assert!(
        idem_store::staged::hold::<DB>(&mut owner, ns, k, at(1))
            .await
            .must("hold"),
        "the probe kept the attempt held"
    );
    assert!(
        idem_store::staged::owner_gone::<DB>(&mut owner, ns, other, at(1))
            .await
            .must("owner_gone"),
        "the probe kept the prober's earlier hold"
    );
    // The third session ends without letting go of attempt 2: the server ends its holds
    // (as the session's server process exits, soon after the connection closes).
    third.detach().close().await.must("closing the connection");
    let mut gone = false;
    for _ in 0..250 {
        gone = idem_store::staged::owner_gone::<DB>(&mut prober, ns, k, at(2))
            .await
            .must("owner_gone");
        if gone {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(gone, "the hold of a closed session outlived it");
}

/// [`reserve_held`](idem_store::staged::reserve_held) reserves a free key holding its attempt 1, in
/// one round trip; it reserves nothing while another session holds attempt 1, and finds a
/// reserved key taken. Without holds it is `reserve`.
pub async fn reserve_held_takes_the_hold_with_the_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let mut one = pool.acquire().await.must("acquiring a connection");
    let mut two = pool.acquire().await.must("acquiring a connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut one)
        .await
        .must("namespace");
    let ns = namespace.as_str();
    let (a, b) = (key("a"), key("b"));
    assert_eq!(
        idem_store::staged::reserve_held::<DB>(
            &mut one,
            ns,
            reservation(a, NOW, NOW + 30_000),
            None
        )
        .await
        .must("reserve_held"),
        (true, true),
        "reserving a free key"
    );
    let row = table.get(a, NOW).await.must("get").must("the reserved key");
    assert_eq!((row.status, row.attempt), (KeyStatus::Processing, 1));
    assert!(
        !idem_store::staged::reserve_held::<DB>(
            &mut two,
            ns,
            reservation(a, NOW, NOW + 30_000),
            None
        )
        .await
        .must("reserve_held")
        .1,
        "a reserved key was reserved again"
    );
    if !idem_store::staged::holds::<DB>() {
        return;
    }
    assert!(
        !idem_store::staged::owner_gone::<DB>(&mut two, ns, a, at(1))
            .await
            .must("owner_gone"),
        "the reservation's hold was not taken"
    );
    // Another session holds b's attempt 1: b is not reserved.
    assert!(
        idem_store::staged::hold::<DB>(&mut two, ns, b, at(1))
            .await
            .must("hold")
    );
    assert_eq!(
        idem_store::staged::reserve_held::<DB>(
            &mut one,
            ns,
            reservation(b, NOW, NOW + 30_000),
            None
        )
        .await
        .must("reserve_held"),
        (false, false),
        "reserved while another session held attempt 1"
    );
    assert!(table.get(b, NOW).await.must("get").is_none(), "b's row");
    // (And `one` let go of a's hold in that round trip.)
    assert!(
        idem_store::staged::owner_gone::<DB>(&mut two, ns, a, at(1))
            .await
            .must("owner_gone"),
        "the earlier hold outlived the next"
    );
}

/// Staged writes run in the application's transaction: a step journaled in a transaction
/// that rolls back is not recorded, nor are the transaction's other writes; committed, both
/// are.
pub async fn journal_commits_with_the_transaction<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    {
        let mut conn = pool.acquire().await.must("acquiring a connection");
        assert!(
            idem_store::staged::reserve::<DB>(&mut conn, reservation(k, NOW, NOW + 30_000), None)
                .await
                .must("reserve")
        );
    }
    let outbox = Outbox::new(pool.clone());
    for commit in [false, true] {
        let step = if commit { "committed" } else { "rolled-back" };
        let mut tx = pool.begin().await.must("begin");
        let message = OutboxMessage::new(step, "conformance.write", serde_json::json!({}));
        assert!(enqueue(&mut tx, &message, NOW, None).await.must("enqueue"));
        let journal = format!("{{\"{step}\":true}}");
        assert!(
            idem_store::staged::journal::<DB>(
                &mut *tx,
                k,
                at(1),
                step,
                &journal,
                NOW + 30_000,
                None
            )
            .await
            .must("journal"),
            "journaling in a transaction"
        );
        if commit {
            tx.commit().await.must("commit");
        } else {
            tx.rollback().await.must("rollback");
        }
        let row = table.get(k, NOW).await.must("get").must("the key");
        let recorded = row.recovery_point.as_deref() == Some(step);
        assert_eq!(
            recorded, commit,
            "the step of a transaction that committed: {commit}"
        );
        let written = outbox.get(step).await.must("Outbox::get").is_some();
        assert_eq!(
            written, commit,
            "the write of a transaction that committed: {commit}"
        );
    }
}

/// [`stuck`](idem_store::staged::stuck) lists the processing keys of one operation whose
/// lease ran out by now (a lease ending exactly now has), the longest stuck first, at most
/// `limit`.
pub async fn stuck_keys_of_an_operation<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let mut conn = pool.acquire().await.must("acquiring a connection");
    for (k, lease) in [
        ("s-2", NOW - 1_000),
        ("s-1", NOW - 3_000),
        ("s-3", NOW),
        ("live", NOW + 1),
    ] {
        assert!(
            idem_store::staged::reserve::<DB>(
                &mut conn,
                reservation(key(k), NOW - HOUR, lease),
                None
            )
            .await
            .must("reserve")
        );
    }
    let other = KeyRef {
        operation: "other:v1",
        ..key("o-1")
    };
    assert!(
        idem_store::staged::reserve::<DB>(
            &mut conn,
            reservation(other, NOW - HOUR, NOW - 9_000),
            None
        )
        .await
        .must("reserve")
    );
    assert!(put(pool, key("done"), NOW - HOUR, NOW + HOUR, b"").await);
    let names = |stuck: Vec<StuckKey>| {
        stuck
            .into_iter()
            .map(|s| (s.scope, s.operation, s.key, s.fence.attempt))
            .collect::<Vec<_>>()
    };
    let at = |k: &str| ("global".to_owned(), "op:v1".to_owned(), k.to_owned(), 1);
    assert_eq!(
        names(
            idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW, i64::MAX, 10)
                .await
                .must("stuck")
        ),
        [at("s-1"), at("s-2"), at("s-3")],
        "stuck keys of op:v1, longest stuck first"
    );
    assert_eq!(
        names(
            idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW, i64::MAX, 2)
                .await
                .must("stuck")
        ),
        [at("s-1"), at("s-2")],
        "stuck keys of op:v1, limit 2"
    );
    assert_eq!(
        names(
            idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW, 2, 10)
                .await
                .must("stuck")
        )
        .len(),
        3,
        "stuck keys of op:v1 below attempt 2"
    );
    assert!(
        idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW, 1, 10)
            .await
            .must("stuck")
            .is_empty(),
        "stuck keys of op:v1 below attempt 1: none (left for an operator)"
    );
    assert_eq!(
        names(
            idem_store::staged::stuck::<DB>(&mut conn, "other:v1", NOW, i64::MAX, 10)
                .await
                .must("stuck")
        ),
        [(
            "global".to_owned(),
            "other:v1".to_owned(),
            "o-1".to_owned(),
            1
        )],
        "stuck keys of other:v1"
    );
    assert!(
        idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW - 5_000, i64::MAX, 10)
            .await
            .must("stuck")
            .is_empty(),
        "stuck keys before any lease ran out"
    );
}
