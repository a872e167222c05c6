//! Storage sealed at rest (`Config::storage_keys`), over HTTP in process, on every store:
//! nothing a client sent or was answered is stored in the clear; replays are byte for byte;
//! keys rotate mid-traffic; a row sealed under a key the server lacks answers `503` and is
//! left as it is; a changed or moved sealed value is never replayed.
#![allow(clippy::unwrap_used)]

mod common;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::app::{App, Reply, Setup, effect, send};
use common::{Harness, TestDb};
use idem_runtime::sqlx::Transaction;
use idem_runtime::store::{Arg, Keyring};
use idem_runtime::{Config, Idem, JsonBody, idempotent};
use serde::{Deserialize, Serialize};

/// What the tests send and look for in the tables.
const SECRET: &str = "Zq7-cardholder-4242-Vw9";

#[derive(Debug, Deserialize, Serialize)]
struct Item {
    name: String,
    #[serde(default)]
    note: String,
}

#[idempotent(scope = "global", ttl = "1h", on_expired = "reexecute")]
async fn secret<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "secret").await;
    let body = serde_json::json!({
        "name": item.name,
        "note": item.note,
        "id": uuid::Uuid::new_v4().to_string(),
    });
    let location = format!("/items/{}", item.name);
    (
        StatusCode::CREATED,
        [("location", location)],
        body.to_string(),
    )
        .into_response()
}

fn routes<DB: TestDb>() -> Router<App<DB>> {
    Router::new().route("/items", post(secret::<DB>))
}

/// A keyring of `ids`, each key its own bytes.
fn ring(ids: &[&str]) -> Keyring {
    Keyring::new(ids.iter().map(|id| (*id, key_bytes(id)))).unwrap()
}

fn key_bytes(id: &str) -> [u8; 32] {
    let mut bytes = [7u8; 32];
    for (b, c) in bytes.iter_mut().zip(id.bytes()) {
        *b = c;
    }
    bytes
}

fn sealed(ids: &[&str]) -> Config {
    Config::default().storage_keys(ring(ids))
}

async fn send_item<DB: TestDb>(app: &Router, key: &str, name: &str) -> Reply {
    let body = serde_json::json!({ "name": name, "note": SECRET }).to_string();
    send(app, "/items", &[("idempotency-key", key)], &body).await
}

/// `idem` serving the routes, as another process on the same database would.
fn serve<DB: TestDb>(idem: Idem<DB>) -> Router {
    routes::<DB>().with_state(App {
        idem,
        auth_runs: Default::default(),
    })
}

/// Every value of every column of idem's tables that could hold what a client sent or was
/// answered, as stored.
async fn stored<DB: TestDb>(h: &Harness<DB>) -> Vec<Vec<u8>> {
    let tables: [(&str, &[(&str, bool)]); 4] = [
        (
            "idempotency_keys",
            &[
                ("fingerprint", true),
                ("response_headers", false),
                ("response_body", true),
                ("request", false),
                ("journal", false),
                ("field_digests", true),
                ("recovery_point", false),
            ],
        ),
        (
            "idempotency_audit",
            &[("before", false), ("after", false), ("reason", false)],
        ),
        (
            "idempotency_outbox",
            &[("payload", false), ("last_error", false)],
        ),
        ("idempotency_inbox", &[("body", false), ("reason", false)]),
    ];
    let mut conn = h.idem.pool().acquire().await.unwrap();
    let mut values = Vec::new();
    for (table, columns) in tables {
        // `before` is a word of MySQL's: every name quoted.
        let quote = if DB::DIALECT.positional { '`' } else { '"' };
        let names: Vec<String> = (columns.iter())
            .map(|(name, _)| format!("{quote}{name}{quote}"))
            .collect();
        let sql = format!("SELECT {} FROM {table}", names.join(", "));
        for row in DB::fetch_all(&mut conn, &sql, &[]).await.unwrap() {
            for (i, (_, binary)) in columns.iter().enumerate() {
                let value = if *binary {
                    DB::opt_bytes(&row, i).unwrap()
                } else {
                    DB::opt_text(&row, i).unwrap().map(String::into_bytes)
                };
                values.extend(value);
            }
        }
    }
    values
}

/// Asserts that `SECRET` is nowhere in idem's tables, as text or as hexadecimal.
async fn nowhere<DB: TestDb>(h: &Harness<DB>) {
    let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    for value in stored(h).await {
        let text = String::from_utf8_lossy(&value);
        for needle in [SECRET.to_owned(), hex.clone(), hex.to_uppercase()] {
            assert!(
                !text.contains(&needle),
                "{needle:?} stored in the clear: {text}"
            );
        }
    }
}

/// A column of key `k`'s row, as stored.
async fn column<DB: TestDb>(h: &Harness<DB>, column: &str, k: &str) -> Vec<u8> {
    let p = if DB::DIALECT.positional { "?" } else { "$1" };
    let sql = format!("SELECT {column} FROM idempotency_keys WHERE idempotency_key = {p}");
    let mut conn = h.idem.pool().acquire().await.unwrap();
    let row = DB::fetch_optional(&mut conn, &sql, &[Arg::Text(k)])
        .await
        .unwrap()
        .unwrap();
    match column {
        "fingerprint" | "response_body" | "field_digests" => DB::bytes(&row, 0).unwrap(),
        _ => DB::text(&row, 0).unwrap().into_bytes(),
    }
}

/// Sets `columns` of key `k`'s row to `values`, behind idem's back.
async fn overwrite<DB: TestDb>(h: &Harness<DB>, k: &str, columns: &[(&str, Arg<'_>)]) {
    let mut args: Vec<Arg<'_>> = columns.iter().map(|(_, value)| *value).collect();
    let set: Vec<String> = (columns.iter().enumerate())
        .map(|(i, (name, _))| match DB::DIALECT.positional {
            true => format!("{name} = ?"),
            false => format!("{name} = ${}", i + 1),
        })
        .collect();
    let last = if DB::DIALECT.positional {
        "?".to_owned()
    } else {
        format!("${}", columns.len() + 1)
    };
    let sql = format!(
        "UPDATE idempotency_keys SET {} WHERE idempotency_key = {last}",
        set.join(", ")
    );
    args.push(Arg::Text(k));
    let mut conn = h.idem.pool().acquire().await.unwrap();
    assert_eq!(DB::execute(&mut conn, &sql, &args).await.unwrap(), 1);
}

/// A key's whole row as stored, to show that nothing changed it.
async fn row_of<DB: TestDb>(h: &Harness<DB>, k: &str) -> Vec<Vec<u8>> {
    let mut row = Vec::new();
    for name in [
        "fingerprint",
        "response_headers",
        "response_body",
        "field_digests",
    ] {
        row.push(column(h, name, k).await);
    }
    let p = if DB::DIALECT.positional { "?" } else { "$1" };
    let sql = format!(
        "SELECT status, attempt, response_status FROM idempotency_keys WHERE idempotency_key = {p}"
    );
    let mut conn = h.idem.pool().acquire().await.unwrap();
    let found = DB::fetch_optional(&mut conn, &sql, &[Arg::Text(k)])
        .await
        .unwrap()
        .unwrap();
    row.push(DB::text(&found, 0).unwrap().into_bytes());
    row.push(DB::int(&found, 1).unwrap().to_be_bytes().to_vec());
    row.push(
        DB::opt_int32(&found, 2)
            .unwrap()
            .unwrap()
            .to_be_bytes()
            .to_vec(),
    );
    row
}

fn sealed_by(value: &[u8]) -> Option<&str> {
    idem_runtime::store::Sealed::key_of(value)
}

/// With a keyring, the response, the fingerprint and the field digests are sealed under its
/// first key; nothing sent or answered is stored in the clear; replays are byte for byte;
/// a `422` still names the field that differs.
async fn nothing_is_stored_in_the_clear<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k1"])).await;
    let app = s.router(routes::<DB>());
    let first = send_item::<DB>(&app, "a", SECRET).await;
    first.created();
    assert!(first.body.contains(SECRET));
    let replay = send_item::<DB>(&app, "a", SECRET).await;
    replay.replay_of(&first);
    assert_eq!(replay.headers["location"], first.headers["location"]);
    let problem = send_item::<DB>(&app, "a", "other").await.problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:key-reused",
    );
    assert_eq!(
        problem["mismatch"]["changed"],
        serde_json::json!(["/body/name"])
    );
    for name in [
        "fingerprint",
        "response_headers",
        "response_body",
        "field_digests",
    ] {
        assert_eq!(
            sealed_by(&column(&s.h, name, "a").await),
            Some("k1"),
            "{name}"
        );
    }
    nowhere(&s.h).await;
    assert_eq!(s.h.effects().await, 1);
}

/// A new first key seals new rows while old ones still open, whichever server answers; a
/// server without the key a row is sealed under answers `503` and changes nothing.
async fn keys_rotate_mid_traffic<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k1"])).await;
    let old = s.router(routes::<DB>());
    let new = serve(s.h.reopen(sealed(&["k2", "k1"])).await);
    let first = send_item::<DB>(&old, "before", SECRET).await;
    first.created();
    // Both servers at once, keys sent through one and replayed through the other.
    let sends = (0..12).map(|i| {
        let (old, new) = (old.clone(), new.clone());
        async move {
            let k = format!("mid-{i}");
            let server = if i % 2 == 0 { &old } else { &new };
            (
                k.clone(),
                i % 2 == 0,
                send_item::<DB>(server, &k, SECRET).await,
            )
        }
    });
    let sent = futures_util::future::join_all(sends).await;
    for (k, by_old, reply) in &sent {
        reply.created();
        let sealer = if *by_old { "k1" } else { "k2" };
        assert_eq!(
            sealed_by(&column(&s.h, "response_body", k).await),
            Some(sealer)
        );
        send_item::<DB>(&new, k, SECRET).await.replay_of(reply);
    }
    send_item::<DB>(&new, "before", SECRET)
        .await
        .replay_of(&first);
    nowhere(&s.h).await;
    assert_eq!(s.h.effects().await, 13);

    // The old server lacks k2: a clear 503, and the row as it was.
    let (k, _, _) = sent.iter().find(|(_, by_old, _)| !by_old).unwrap();
    let row = row_of(&s.h, k).await;
    let reply = send_item::<DB>(&old, k, SECRET).await;
    let problem = reply.problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:idem:problem:storage-key-unknown",
    );
    assert!(reply.headers.contains_key("retry-after"));
    assert!(
        problem["detail"].as_str().unwrap().contains("`k2`"),
        "{problem}"
    );
    assert!(!reply.body.contains(SECRET));
    // Nor with another body: the fingerprint cannot be compared either.
    send_item::<DB>(&old, k, "other").await.problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:idem:problem:storage-key-unknown",
    );
    // A server with no keys at all: the same.
    let clear = serve(s.h.reopen(Config::default()).await);
    send_item::<DB>(&clear, "before", SECRET).await.problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "urn:idem:problem:storage-key-unknown",
    );
    assert_eq!(row_of(&s.h, k).await, row);
    assert_eq!(s.h.effects().await, 13, "nothing ran again");
    // Once expired, the key is run again without its sealed row being opened.
    s.h.advance(std::time::Duration::from_secs(3601));
    send_item::<DB>(&old, k, SECRET).await.created();
    assert_eq!(
        sealed_by(&column(&s.h, "response_body", k).await),
        Some("k1")
    );
    assert_eq!(s.h.effects().await, 14);
    // Rows written before the keys were set are still read by a server that has them.
    send_item::<DB>(&clear, "plain", SECRET).await.created();
    assert_eq!(
        sealed_by(&column(&s.h, "response_body", "plain").await),
        None
    );
    let plain = send_item::<DB>(&clear, "plain", SECRET).await;
    send_item::<DB>(&new, "plain", SECRET)
        .await
        .replay_of(&plain);
}

/// A sealed value changed by a byte, or moved onto another key's row (with its
/// fingerprint, or alone), is refused: `500`, never replayed, nothing run again.
async fn tampered_values_are_never_replayed<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k1"])).await;
    let app = s.router(routes::<DB>());
    for k in ["flipped", "donor", "moved", "moved-alone"] {
        send_item::<DB>(&app, k, k).await.created();
    }
    let unreadable = |reply: Reply| {
        reply.problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "urn:idem:problem:sealed-unreadable",
        );
    };
    let mut body = column(&s.h, "response_body", "flipped").await;
    let last = body.len() - 1;
    body[last] ^= 1;
    overwrite(&s.h, "flipped", &[("response_body", Arg::Bytes(&body))]).await;
    unreadable(send_item::<DB>(&app, "flipped", "flipped").await);

    // The donor's whole sealed row onto another key: its fingerprint does not open there.
    let donor: Vec<Vec<u8>> = {
        let mut v = Vec::new();
        for name in [
            "fingerprint",
            "response_headers",
            "response_body",
            "field_digests",
        ] {
            v.push(column(&s.h, name, "donor").await);
        }
        v
    };
    let headers = String::from_utf8(donor[1].clone()).unwrap();
    overwrite(
        &s.h,
        "moved",
        &[
            ("fingerprint", Arg::Bytes(&donor[0])),
            ("response_headers", Arg::Text(&headers)),
            ("response_body", Arg::Bytes(&donor[2])),
            ("field_digests", Arg::Bytes(&donor[3])),
        ],
    )
    .await;
    unreadable(send_item::<DB>(&app, "moved", "donor").await);
    unreadable(send_item::<DB>(&app, "moved", "moved").await);
    // The response alone, under the row's own fingerprint.
    overwrite(
        &s.h,
        "moved-alone",
        &[
            ("response_headers", Arg::Text(&headers)),
            ("response_body", Arg::Bytes(&donor[2])),
        ],
    )
    .await;
    let reply = send_item::<DB>(&app, "moved-alone", "moved-alone").await;
    assert!(!reply.body.contains("donor"), "{}", reply.body);
    unreadable(reply);
    // The donor itself still replays.
    let donor = send_item::<DB>(&app, "donor", "donor").await;
    assert_eq!(donor.status, StatusCode::CREATED);
    assert!(donor.replayed());
    assert_eq!(s.h.effects().await, 4);
}

/// The headers column of a sealed response holds a marker that nothing authenticates:
/// changed by one byte, emptied or NULL, the replay is a `500`, never a `2xx` made of the
/// ciphertext. A clear row whose headers do not read is a `500` too, never replayed without
/// them.
async fn a_changed_marker_is_never_replayed<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k2"])).await;
    let app = s.router(routes::<DB>());
    send_item::<DB>(&app, "marked", SECRET).await.created();
    let markers = [
        Some("idem-sealed:v1:k2;"),
        Some("idem-sealed:v2:k2:"),
        Some("[]"),
        Some(""),
        None,
    ];
    for marker in markers {
        overwrite(
            &s.h,
            "marked",
            &[("response_headers", Arg::OptText(marker))],
        )
        .await;
        let reply = send_item::<DB>(&app, "marked", SECRET).await;
        assert!(
            !reply.body.contains("idem-sealed"),
            "{marker:?}: {}",
            reply.body
        );
        reply.problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "urn:idem:problem:sealed-unreadable",
        );
    }
    overwrite(
        &s.h,
        "marked",
        &[("response_headers", Arg::Text("idem-sealed:v1:k2:"))],
    )
    .await;
    let replay = send_item::<DB>(&app, "marked", SECRET).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert!(replay.replayed() && replay.body.contains(SECRET));

    let clear = serve(s.h.reopen(Config::default()).await);
    send_item::<DB>(&clear, "plain", SECRET).await.created();
    overwrite(
        &s.h,
        "plain",
        &[("response_headers", Arg::Text("not json"))],
    )
    .await;
    let reply = send_item::<DB>(&clear, "plain", SECRET).await;
    assert!(!reply.body.contains(SECRET), "{}", reply.body);
    reply.problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "urn:idem:problem:stored-unreadable",
    );
    assert_eq!(s.h.effects().await, 2, "nothing ran again");
}

/// Rotation in two phases costs no request: the new key is first given to every server as
/// one that only opens (after the sealing one), then made the sealing key. Servers of each
/// phase beside those of the phase before open each other's rows: no `503`.
async fn two_phase_rotation_answers_every_request<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k1"])).await;
    let old = s.router(routes::<DB>());
    let phase_one = serve(s.h.reopen(sealed(&["k1", "k2"])).await);
    let phase_two = serve(s.h.reopen(sealed(&["k2", "k1"])).await);
    let mut sent: i64 = 0;
    for (a, b) in [(&old, &phase_one), (&phase_one, &phase_two)] {
        for (i, (first, other)) in [(a, b), (b, a)].into_iter().enumerate() {
            let k = format!("rotation-{sent}-{i}");
            let reply = send_item::<DB>(first, &k, SECRET).await;
            reply.created();
            send_item::<DB>(other, &k, SECRET).await.replay_of(&reply);
            sent += 1;
        }
    }
    // Phase one still seals under k1; phase two under k2, which phase one opens.
    let by_phase_one = column(&s.h, "response_body", "rotation-2-0").await;
    assert_eq!(sealed_by(&by_phase_one), Some("k1"));
    let by_phase_two = column(&s.h, "response_body", "rotation-3-1").await;
    assert_eq!(sealed_by(&by_phase_two), Some("k2"));
    assert_eq!(s.h.effects().await, sent);
}

/// A server given no storage keys refuses to start on a key table whose newest rows are
/// sealed (it would answer `503` for them and write its own in the clear), naming the key,
/// unless told to start anyway.
async fn a_server_without_keys_refuses_a_sealed_table<DB: TestDb>() {
    let s = Setup::<DB>::new(sealed(&["k1"])).await;
    let app = s.router(routes::<DB>());
    send_item::<DB>(&app, "a", SECRET).await.created();
    let clear = s.h.reopen(Config::default()).await;
    match clear.migrate().await {
        Err(idem_runtime::store::StoreError::NeedsStorageKeys(why)) => {
            assert!(why.contains("`k1`"), "{why}");
        }
        other => panic!("a start without the keys: {other:?}"),
    }
    let anyway =
        s.h.reopen(Config::default().clear_beside_sealed(true))
            .await;
    anyway.migrate().await.unwrap();
    s.h.reopen(sealed(&["k1"])).await.migrate().await.unwrap();
}

idem_testkit::on_every_store!(
    nothing_is_stored_in_the_clear,
    two_phase_rotation_answers_every_request,
    a_server_without_keys_refuses_a_sealed_table,
    keys_rotate_mid_traffic,
    tampered_values_are_never_replayed,
    a_changed_marker_is_never_replayed,
);
