//! The `idem` command line, run as a process against real databases seeded through idem's
//! runtime: every case that touches a database runs on every store.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use base64::Engine as _;
use common::{
    BINARY_BODY, InboxSeeded, K1, K2, MESSAGES, ORDERS, ORPHAN_BODY, OutboxSeeded, SEALED_SECRET,
    SealedSeeded, Seeded, idem,
};
use idem_runtime::clock::{Clock as _, SystemClock};
use idem_runtime::outbox::OutboxStatus;
use idem_runtime::spec::Scope;
use idem_runtime::store::{AuditFilter, KeyStatus};
use idem_runtime::{IdempotencyKey, OnceError};
use idem_testkit::harness::TestBackend;
use serde_json::{Value, json};

const EXIT_USAGE: i32 = 2;
const EXIT_NOT_FOUND: i32 = 3;
const EXIT_REFUSED: i32 = 4;

/// The `key` fields of a listing.
fn keys_of(doc: &Value) -> Vec<String> {
    doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap().to_owned())
        .collect()
}

/// `head`, then the key's arguments, then `tail`.
fn with<'a>(head: &[&'a str], key: Vec<&'a str>, tail: &[&'a str]) -> Vec<&'a str> {
    [head, &key, tail].concat()
}

/// Listing with each filter, the listing's shape, pagination through `next`, `stuck`.
async fn lists_filter_and_paginate<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    let all = s.run(&["keys", "list", "--json"]);
    let doc = all.code(0).json();
    assert_eq!(keys_of(&doc).len(), 12, "{doc:#}");
    assert_eq!(doc["next"], Value::Null);
    let a1 = doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "a-1")
        .unwrap();
    assert_eq!(a1["scope"], "global");
    assert_eq!(a1["operation"], "orders:v1");
    assert_eq!(a1["status"], "completed");
    assert_eq!(a1["response_status"], 201);
    for field in ["created_at", "expires_at", "completed_at"] {
        let at = a1[field].as_str().unwrap();
        assert!(
            at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
            "{field}: {at}"
        );
    }

    for (status, expected) in [
        (
            "completed",
            vec!["a-1", "a-2", "a-3", "bin-1", "s-done", "t-1"],
        ),
        ("stuck", vec!["s-stuck-1", "s-stuck-2", "s-stuck-3"]),
        ("expired", vec!["old-1", "recent-1"]),
        ("processing", vec!["s-running"]),
    ] {
        let doc = s
            .run(&["keys", "list", "--status", status, "--json"])
            .json();
        let mut keys = keys_of(&doc);
        keys.sort();
        assert_eq!(keys, expected, "--status {status}");
        assert!(
            doc["keys"]
                .as_array()
                .unwrap()
                .iter()
                .all(|k| k["status"] == status)
        );
    }
    let stuck = s.run(&["stuck", "--json"]).code(0).json();
    assert_eq!(keys_of(&stuck), ["s-stuck-1", "s-stuck-2", "s-stuck-3"]);
    let stuck_row = &stuck["keys"][0];
    assert_eq!(stuck_row["recovery_point"], "charge");
    assert_eq!(stuck_row["attempt"], 1);
    assert!(stuck_row["locked_until"].is_string());

    let by_operation = s
        .run(&["keys", "list", "--operation", "refunds:v1", "--json"])
        .json();
    assert_eq!(keys_of(&by_operation), ["t-1"]);
    let by_scope = s
        .run(&["keys", "list", "--scope", "tenant:acme", "--json"])
        .json();
    assert_eq!(keys_of(&by_scope).len(), 6);
    let by_prefix = s
        .run(&["--json", "keys", "list", "--key-prefix", "a-"])
        .json();
    assert_eq!(keys_of(&by_prefix), ["a-1", "a-2", "a-3"]);
    let combined = s
        .run(&[
            "keys",
            "list",
            "--scope",
            "global",
            "--status",
            "expired",
            "--key-prefix",
            "old",
            "--json",
        ])
        .json();
    assert_eq!(keys_of(&combined), ["old-1"]);

    // Pagination: pages of 4 through `next`, the same keys in the same order.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = vec!["keys", "list", "--limit", "4", "--json"];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor.as_str()]);
        }
        let page = s.run(&args).code(0).json();
        pages += 1;
        let keys = keys_of(&page);
        assert!(keys.len() <= 4);
        paged.extend(keys);
        match &page["next"] {
            Value::String(next) => after = Some(next.clone()),
            Value::Null => break,
            other => panic!("next: {other}"),
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, keys_of(&doc));
    assert_eq!(paged.iter().collect::<BTreeSet<_>>().len(), 12);

    // Tables for people.
    let text = s
        .run(&["keys", "list", "--limit", "4"])
        .code(0)
        .stdout
        .clone();
    assert!(text.starts_with("STATUS"), "{text}");
    assert!(text.contains("more: --after "), "{text}");
    assert_eq!(text.lines().count(), 6, "{text}");

    // Usage errors.
    let bad = s.run(&["keys", "list", "--after", "not-a-cursor"]);
    bad.code(EXIT_USAGE);
    assert!(bad.stderr.contains("--after"), "{}", bad.stderr);
    let bad = s.run(&["keys", "list", "--status", "done"]);
    bad.code(EXIT_USAGE);
    assert!(bad.stderr.contains("--status"), "{}", bad.stderr);
}

/// `keys show`: every column, text and binary bodies, journal and request, audit history.
async fn show_tells_everything<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    let a1 = s
        .run(&[
            "keys",
            "show",
            "--scope",
            "global",
            "--operation",
            "orders:v1",
            "--key",
            "a-1",
            "--json",
        ])
        .code(0)
        .json();
    assert_eq!(a1["status"], "completed");
    let fingerprint = a1["fingerprint"].as_str().unwrap();
    assert_eq!(fingerprint.len(), 64);
    assert!(fingerprint.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(a1["response"]["status"], 201);
    assert_eq!(a1["response"]["body"], r#"{"order":10}"#);
    assert_eq!(
        a1["response"]["headers"][0],
        serde_json::json!(["content-type", "application/json"])
    );
    assert_eq!(a1["attempt"], 0);
    assert_eq!(a1["journal"], Value::Null);
    assert_eq!(a1["request"], Value::Null);
    assert_eq!(a1["audit"], serde_json::json!([]));

    let bin = s
        .run(&[
            "keys",
            "show",
            "--scope",
            "global",
            "--operation",
            "orders:v1",
            "--key",
            "bin-1",
            "--json",
        ])
        .code(0)
        .json();
    assert_eq!(bin["response"]["body"], Value::Null);
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bin["response"]["body_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, BINARY_BODY);

    let done = s
        .run(&[
            "--json",
            "keys",
            "show",
            "--scope",
            "tenant:acme",
            "--operation",
            "pay:v1",
            "--key",
            "s-done",
        ])
        .code(0)
        .json();
    assert_eq!(done["recovery_point"], "charge");
    assert!(
        done["journal"]["charge"]
            .as_str()
            .unwrap()
            .starts_with("ch_")
    );
    assert_eq!(done["request"], serde_json::json!({"amount": 100}));

    // The audit history, newest first.
    let key = [
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "a-2",
    ];
    let expire = [&["keys", "expire"][..], &key, &["--reason", "first"]].concat();
    s.run(&expire).code(0);
    let delete = [&["keys", "delete"][..], &key, &["--reason", "second"]].concat();
    s.run(&delete).code(0);
    let shown = s.run(&[&["keys", "show"][..], &key].concat());
    shown.code(EXIT_NOT_FOUND);
    assert!(shown.stderr.contains("a-2"), "{}", shown.stderr);
    let key3 = [
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "a-3",
    ];
    s.run(&[&["keys", "expire", "--operator", "carol"][..], &key3].concat())
        .code(0);
    let a3 = s
        .run(&[&["keys", "show", "--json"][..], &key3].concat())
        .code(0)
        .json();
    assert_eq!(a3["status"], "expired");
    let audit = a3["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["operator"], "carol");
    assert_eq!(audit[0]["action"], "expire");
    assert_eq!(audit[0]["reason"], Value::Null);

    // For people.
    let text = s.run(&[&["keys", "show"][..], &key3].concat()).stdout;
    assert!(text.contains("fingerprint:"), "{text}");
    assert!(text.contains("carol"), "{text}");

    // Missing key: 3, with --json an error document too.
    let missing = s.run(&[
        "keys",
        "show",
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "nope",
        "--json",
    ]);
    missing.code(EXIT_NOT_FOUND);
    assert_eq!(missing.json()["code"], EXIT_NOT_FOUND);
}

/// `keys show --body`: the fields a body changes, adds and removes against the body the key
/// was first used with, by name and never a value; the same body; a key without digests;
/// `--json`; `--read-only`, which it needs nothing beyond; files that cannot be read or are
/// not JSON.
async fn show_compares_a_body<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    // A key written through the runtime with its canonical request as `#[idempotent]` writes
    // it for a handler with a path parameter and a JSON body: its field digests are stored.
    let request = |body: &Value| json!({"body": body, "path": {"id": "order-9"}});
    let first = json!({
        "amount": 4242.25,
        "currency": "EUR",
        "note": "gift-wrap-please",
        "items": [{"sku": "sku-77", "qty": 3}],
    });
    let once = |body: Value| {
        let idem = s.idem.clone();
        async move {
            let key = IdempotencyKey::new("b-1").unwrap();
            idem.once(&ORDERS, &Scope::global(), &key, &request(&body), |_tx| {
                Box::pin(async { Ok::<_, std::convert::Infallible>(json!({"order": 1})) })
            })
            .await
        }
    };
    once(first.clone()).await.unwrap();
    let key = [
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "b-1",
    ];
    // What the body holds, which no output may show.
    let values = ["4242.25", "EUR", "gift-wrap-please", "sku-77", "order-9"];
    let never_a_value = |run: &common::Run| {
        for value in values {
            assert!(!run.stdout.contains(value), "{value} shown: {}", run.stdout);
        }
    };
    let file = |body: &[u8]| {
        let path = idem_testkit::harness::temp_dir().join(format!(
            "{}.json",
            idem_testkit::harness::unique("compared")
        ));
        std::fs::write(&path, body).unwrap();
        path.to_str().unwrap().to_owned()
    };

    // One field changed.
    let mut changed = first.clone();
    changed["amount"] = json!(4243.25);
    let path = file(changed.to_string().as_bytes());
    let shown = s.run(&with(&["keys", "show"], key.to_vec(), &["--body", &path]));
    let text = &shown.code(0).stdout;
    assert!(text.contains("\n  changed  /body/amount\n"), "{text}");
    assert!(!text.contains("added"), "{text}");
    assert!(!text.contains("removed"), "{text}");
    assert!(!text.contains("/body/note"), "{text}");
    // (The text of `keys show` comes first, unchanged.)
    never_a_value(&shown);
    // Without --body, nothing of it.
    let plain = s.run(&with(&["keys", "show"], key.to_vec(), &[]));
    assert!(!plain.code(0).stdout.contains("--body"), "{}", plain.stdout);
    // The runtime's own 422 names the same field.
    match once(changed).await {
        Err(OnceError::Idem(idem_runtime::Error::Mismatch(Some(mismatch)))) => {
            assert_eq!(mismatch.changed, ["/body/amount"]);
        }
        other => panic!("{other:?}"),
    }

    // One field added (a name the first request did not have: told as a change of its
    // nearest known ancestor, never by its own name), one removed, one changed deeper down;
    // from stdin.
    let mut reshaped = first.clone();
    reshaped.as_object_mut().unwrap().remove("note");
    reshaped["memo"] = json!("gift-wrap-please");
    reshaped["items"][0]["qty"] = json!(4);
    let shown = s.run_with_stdin(
        &with(&["keys", "show"], key.to_vec(), &["--body", "-"]),
        Some(reshaped.to_string().as_bytes()),
    );
    let text = &shown.code(0).stdout;
    assert!(text.contains("\n  changed  /body/items/0/qty\n"), "{text}");
    assert!(text.contains("\n  changed  /body\n"), "{text}");
    assert!(!text.contains("memo"), "{text}");
    assert!(text.contains("\n  removed  /body/note\n"), "{text}");
    // Only body fields: the path the body does not tell is not removed.
    assert!(!text.contains("/path"), "{text}");
    never_a_value(&shown);
    let doc = s
        .run_with_stdin(
            &with(&["--json", "keys", "show"], key.to_vec(), &["--body", "-"]),
            Some(reshaped.to_string().as_bytes()),
        )
        .code(0)
        .json();
    assert_eq!(
        doc["mismatch"],
        json!({
            "changed": ["/body", "/body/items/0/qty"],
            "added": [],
            "removed": ["/body/note"],
        })
    );
    assert_eq!(doc["key"], "b-1");
    assert_eq!(doc["status"], "completed");
    for value in values {
        assert!(!doc["mismatch"].to_string().contains(value), "{doc}");
    }

    // The same body, members in another order, under --read-only: no field differs, and the
    // audit trail gets nothing.
    let same = br#"{"items":[{"qty":3,"sku":"sku-77"}],"note":"gift-wrap-please","currency":"EUR","amount":4242.25}"#;
    let path = file(same);
    let shown = s.run(&with(
        &["--read-only", "keys", "show"],
        key.to_vec(),
        &["--body", &path],
    ));
    let text = &shown.code(0).stdout;
    assert!(
        text.contains("\n--body: no field differs from the first request's body\n"),
        "{text}"
    );
    never_a_value(&shown);
    let doc = s
        .run(&with(
            &["--read-only", "--json", "keys", "show"],
            key.to_vec(),
            &["--body", &path],
        ))
        .code(0)
        .json();
    assert_eq!(
        doc["mismatch"],
        json!({"changed": [], "added": [], "removed": []})
    );
    assert_eq!(doc["audit"], json!([]));
    let audited = s
        .table()
        .audit(&AuditFilter::new().operator("os-user"))
        .await
        .unwrap();
    assert!(audited.is_empty(), "{audited:?}");

    // A key written without its request keeps no digests: said plainly, `null` in JSON.
    let a1 = [
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "a-1",
    ];
    let shown = s.run(&with(&["keys", "show"], a1.to_vec(), &["--body", &path]));
    let text = &shown.code(0).stdout;
    assert!(
        text.contains("\n--body: no field digests kept for this key"),
        "{text}"
    );
    let doc = s
        .run(&with(
            &["keys", "show", "--json"],
            a1.to_vec(),
            &["--body", &path],
        ))
        .code(0)
        .json();
    assert_eq!(doc["mismatch"], Value::Null);
    // Without --body, no `mismatch` member.
    let doc = s
        .run(&with(&["keys", "show", "--json"], a1.to_vec(), &[]))
        .code(0)
        .json();
    assert!(doc.get("mismatch").is_none(), "{doc}");

    // A field the operation leaves out of the fingerprint, known from its registered
    // document, is not compared: another note is no difference.
    const NOTED: idem_runtime::spec::OperationSpec =
        idem_runtime::spec::OperationSpec::new("noted:v1").fingerprint_exclude(&["body.note"]);
    s.idem
        .register_docs(&[idem_runtime::docs::OperationDoc::from_spec(&NOTED)])
        .await
        .unwrap();
    let n1_key = IdempotencyKey::new("n-1").unwrap();
    s.idem
        .once(&NOTED, &Scope::global(), &n1_key, &request(&first), |_tx| {
            Box::pin(async { Ok::<_, std::convert::Infallible>(json!({"order": 2})) })
        })
        .await
        .unwrap();
    let mut noted = first.clone();
    noted["note"] = json!("no-wrap");
    let path = file(noted.to_string().as_bytes());
    let n1 = [
        "--scope",
        "global",
        "--operation",
        "noted:v1",
        "--key",
        "n-1",
    ];
    let doc = s
        .run(&with(
            &["--json", "keys", "show"],
            n1.to_vec(),
            &["--body", &path],
        ))
        .code(0)
        .json();
    assert_eq!(
        doc["mismatch"],
        json!({"changed": [], "added": [], "removed": []})
    );

    // Not JSON: a usage error, before any query (even of a key that does not exist).
    let bad = file(b"{\"amount\": 4242.25,");
    let missing = [
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "nope",
    ];
    for key in [key.to_vec(), missing.to_vec()] {
        let run = s.run(&with(&["keys", "show"], key, &["--body", &bad]));
        run.code(EXIT_USAGE);
        assert!(run.stderr.contains("not JSON"), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    let run = s.run_with_stdin(
        &with(&["keys", "show", "--json"], key.to_vec(), &["--body", "-"]),
        Some(b"amount=4242.25"),
    );
    run.code(EXIT_USAGE);
    assert_eq!(run.json()["code"], EXIT_USAGE);
    assert!(
        run.stderr.contains("--body stdin: not JSON"),
        "{}",
        run.stderr
    );
    // A file that cannot be read: an error, as for `keys complete --body`.
    let gone = format!("{bad}.gone");
    let run = s.run(&with(&["keys", "show"], key.to_vec(), &["--body", &gone]));
    run.code(1);
    assert!(
        run.stderr.contains("cannot read the body"),
        "{}",
        run.stderr
    );
}

/// Every action: applied and checked in the database, audited with operator and reason;
/// refused ones exit 4, missing keys 3, usage errors 2.
async fn actions_are_fenced_and_audited<DB: TestBackend>() {
    let mut s = Seeded::<DB>::new().await;
    let pay = |k: &'static str| -> Vec<&'static str> {
        vec![
            "--scope",
            "tenant:acme",
            "--operation",
            "pay:v1",
            "--key",
            k,
        ]
    };
    let order = |k: &'static str| -> Vec<&'static str> {
        vec!["--scope", "global", "--operation", "orders:v1", "--key", k]
    };

    // release a stuck key.
    let released = s
        .run(&with(
            &["keys", "release", "--operator", "alice"],
            pay("s-stuck-1"),
            &["--reason", "INC-1", "--json"],
        ))
        .code(0)
        .json();
    assert_eq!(released["action"], "release");
    assert_eq!(released["before"]["attempt"], 1);
    assert_eq!(released["after"]["attempt"], 2);
    let audit_id = released["audit_id"].as_i64().unwrap();
    let row = s.row("tenant:acme", "pay:v1", "s-stuck-1").await.unwrap();
    assert_eq!(row.attempt, 2);
    assert_eq!(row.status, KeyStatus::Stuck);

    // complete a stuck key with a body file and headers.
    let body = idem_testkit::harness::temp_dir()
        .join(format!("{}.json", idem_testkit::harness::unique("body")));
    std::fs::write(&body, br#"{"settled":"by hand"}"#).unwrap();
    let body_path = body.to_str().unwrap();
    let completed = s
        .run(&[
            "keys",
            "complete",
            "--scope",
            "tenant:acme",
            "--operation",
            "pay:v1",
            "--key",
            "s-stuck-2",
            "--status",
            "201",
            "--body",
            body_path,
            "--header",
            "Content-Type: application/json",
            "--header",
            "Location: /payments/7",
            "--reason",
            "settled with the provider",
            "--operator",
            "alice",
            "--json",
        ])
        .code(0)
        .json();
    assert_eq!(completed["after"]["status"], "completed");
    assert_eq!(completed["after"]["response"]["status"], 201);
    let row = s.row("tenant:acme", "pay:v1", "s-stuck-2").await.unwrap();
    assert_eq!(row.status, KeyStatus::Completed);
    let response = row.response.unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(response.body.as_ref(), br#"{"settled":"by hand"}"#);
    assert_eq!(
        response.headers,
        [
            ("content-type".to_owned(), "application/json".to_owned()),
            ("location".to_owned(), "/payments/7".to_owned())
        ]
    );

    // fail: a success status is a usage error; a failure from stdin is stored.
    s.run(&with(
        &["keys", "fail"],
        pay("s-stuck-3"),
        &["--status", "200", "--body", body_path],
    ))
    .code(EXIT_USAGE);
    s.run(&with(
        &["keys", "fail"],
        pay("s-stuck-3"),
        &["--status", "502", "--header", "no colon here"],
    ))
    .code(EXIT_USAGE);
    let failed = s.run_with_stdin(
        &with(
            &["keys", "fail"],
            pay("s-stuck-3"),
            &[
                "--status",
                "502",
                "--body",
                "-",
                "--reason",
                "provider down",
            ],
        ),
        Some(b"upstream gone"),
    );
    failed.code(0);
    assert!(failed.stdout.contains("before:"), "{}", failed.stdout);
    let row = s.row("tenant:acme", "pay:v1", "s-stuck-3").await.unwrap();
    let response = row.response.unwrap();
    assert_eq!(response.status, 502);
    assert_eq!(response.body.as_ref(), b"upstream gone");

    // expire and delete.
    s.run(&with(
        &["keys", "expire"],
        order("a-1"),
        &["--reason", "clean"],
    ))
    .code(0);
    let row = s.row("global", "orders:v1", "a-1").await.unwrap();
    assert_eq!(row.status, KeyStatus::Expired);
    let deleted = s
        .run(&with(&["keys", "delete"], order("a-3"), &["--json"]))
        .code(0)
        .json();
    assert_eq!(deleted["after"], Value::Null);
    assert!(s.row("global", "orders:v1", "a-3").await.is_none());

    // Refused: not applicable (4), missing (3), read-only (4).
    let refused = s.run(&with(&["keys", "release"], order("a-2"), &["--json"]));
    refused.code(EXIT_REFUSED);
    assert!(!refused.stderr.trim().is_empty());
    assert_eq!(refused.json()["code"], EXIT_REFUSED);
    s.run(&with(&["keys", "expire"], order("old-1"), &[]))
        .code(EXIT_REFUSED);
    s.run(&with(&["keys", "delete"], order("missing"), &[]))
        .code(EXIT_NOT_FOUND);
    let before = s.row("global", "orders:v1", "a-2").await.unwrap();
    let read_only = s.run(&with(&["keys", "expire", "--read-only"], order("a-2"), &[]));
    read_only.code(EXIT_REFUSED);
    assert!(
        read_only.stderr.contains("read-only"),
        "{}",
        read_only.stderr
    );
    s.run(&with(&["--read-only", "keys", "delete"], order("a-2"), &[]))
        .code(EXIT_REFUSED);
    assert_eq!(s.row("global", "orders:v1", "a-2").await.unwrap(), before);

    // The audit trail: every applied action, with its operator and reason.
    let entries = s.table().audit(&AuditFilter::new()).await.unwrap();
    let actions: Vec<(&str, &str, Option<&str>)> = entries
        .iter()
        .map(|e| (e.operator.as_str(), e.action.as_str(), e.reason.as_deref()))
        .collect();
    assert_eq!(
        actions,
        [
            ("os-user", "delete", None),
            ("os-user", "expire", Some("clean")),
            ("os-user", "fail", Some("provider down")),
            ("alice", "complete", Some("settled with the provider")),
            ("alice", "release", Some("INC-1")),
        ]
    );
    assert_eq!(entries.last().unwrap().id, audit_id);

    // `idem audit`, with filters.
    let doc = s.run(&["audit", "--json"]).code(0).json();
    assert_eq!(doc["audit"].as_array().unwrap().len(), 5);
    assert_eq!(doc["audit"][0]["action"], "delete");
    let alice = s.run(&["audit", "--by", "alice", "--json"]).json();
    assert_eq!(alice["audit"].as_array().unwrap().len(), 2);
    let limited = s.run(&["audit", "--limit", "1", "--json"]).json();
    assert_eq!(limited["audit"].as_array().unwrap().len(), 1);
    let one_key = s
        .run(&with(&["audit", "--json"], pay("s-stuck-1"), &[]))
        .json();
    assert_eq!(one_key["audit"][0]["reason"], "INC-1");
    assert!(s.run(&["audit"]).code(0).stdout.contains("INC-1"));
    std::fs::remove_file(body).ok();

    // A running attempt (its lease is live): every action is refused unless forced, and
    // says why and how to override; expire never applies to a key that is not final.
    let running = s.row("tenant:acme", "pay:v1", "s-running").await.unwrap();
    assert_eq!(running.status, KeyStatus::Processing);
    for (head, tail) in [
        (&["keys", "release"][..], &[][..]),
        (&["keys", "complete"][..], &["--status", "201"][..]),
        (&["keys", "fail"][..], &["--status", "502"][..]),
        (&["keys", "delete"][..], &[][..]),
    ] {
        let refused = s.run(&with(head, pay("s-running"), tail));
        refused.code(EXIT_REFUSED);
        assert!(refused.stderr.contains("live until"), "{}", refused.stderr);
        assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
        // --read-only refuses a forced action all the same.
        let read_only = s.run(&with(
            &[&["--read-only"][..], head].concat(),
            pay("s-running"),
            &[tail, &["--force"][..]].concat(),
        ));
        read_only.code(EXIT_REFUSED);
        assert!(
            read_only.stderr.contains("read-only"),
            "{}",
            read_only.stderr
        );
    }
    for force in [&[][..], &["--force"][..]] {
        let expire = s.run(&with(&["keys", "expire"], pay("s-running"), force));
        expire.code(EXIT_REFUSED);
        assert!(expire.stderr.contains("never expires"), "{}", expire.stderr);
        assert!(expire.stderr.contains("release"), "{}", expire.stderr);
        // Forced or not, the refusal alone: no forcing risk for an action that cannot apply.
        assert!(!expire.stderr.contains("warning"), "{}", expire.stderr);
        assert!(!expire.stderr.contains("risk"), "{}", expire.stderr);
    }
    assert_eq!(
        s.row("tenant:acme", "pay:v1", "s-running").await.unwrap(),
        running
    );

    // Forced, releasing the running attempt fences it out: its last write is refused.
    // The tool says what forcing risks before it acts, and in --json.
    let released = s.run(&with(
        &["keys", "release"],
        pay("s-running"),
        &["--reason", "hung", "--force", "--json"],
    ));
    assert!(
        released
            .stderr
            .contains("warning: forcing release: an attempt is running"),
        "{}",
        released.stderr
    );
    let released = released.code(0).json();
    assert_eq!(released["before"]["status"], "processing");
    assert_eq!(released["after"]["attempt"], 2);
    assert_eq!(released["forced"], true);
    let risk = released["risk"].as_str().unwrap();
    assert!(risk.contains("no record of it in the key"), "{risk}");
    assert!(s.finish_running().await.is_err(), "fenced out");
    let row = s.row("tenant:acme", "pay:v1", "s-running").await.unwrap();
    assert_eq!((row.status, row.attempt), (KeyStatus::Stuck, 2));
    assert!(row.response.is_none());

    // A completed staged key: deleting it would let its steps run again; forced only.
    let refused = s.run(&with(&["keys", "delete"], pay("s-done"), &["--json"]));
    refused.code(EXIT_REFUSED);
    assert!(
        refused.stderr.contains("run them again"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(refused.json()["code"], EXIT_REFUSED);
    assert!(s.row("tenant:acme", "pay:v1", "s-done").await.is_some());
    let deleted = s.run(&with(
        &["keys", "delete"],
        pay("s-done"),
        &["--force", "--reason", "INC-9"],
    ));
    deleted.code(0);
    assert!(
        deleted.stdout.starts_with("delete (forced)"),
        "{}",
        deleted.stdout
    );
    assert!(
        deleted
            .stdout
            .contains("forced over: the key completed in staged mode"),
        "{}",
        deleted.stdout
    );
    assert!(
        deleted.stderr.contains("a second charge"),
        "{}",
        deleted.stderr
    );
    assert!(s.row("tenant:acme", "pay:v1", "s-done").await.is_none());

    // The audit trail says which actions were forced.
    let doc = s.run(&["audit", "--json"]).code(0).json();
    let forced: Vec<(&str, bool)> = doc["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["forced"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        forced[..3],
        [("delete", true), ("release", true), ("delete", false)]
    );
    let text = s.run(&with(&["audit"], pay("s-done"), &[])).stdout;
    assert!(text.contains("delete (forced)"), "{text}");
}

/// `stats`, `sweep` (dry run, then for real) and `operations`.
async fn stats_sweep_and_operations<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    let stats = s.run(&["stats", "--json"]).code(0).json();
    assert_eq!(
        stats["by_status"],
        serde_json::json!({"completed": 6, "processing": 1, "stuck": 3, "expired": 2, "total": 12})
    );
    assert_eq!(stats["by_operation"]["pay:v1"]["stuck"], 3);
    assert_eq!(stats["by_operation"]["orders:v1"]["expired"], 2);
    assert!(stats["oldest_stuck"]["created_at"].is_string());
    assert!(stats["oldest_stuck"]["age_seconds"].as_i64().unwrap() >= 0);
    assert!(s.run(&["stats"]).code(0).stdout.contains("stuck"));

    // A dry run counts and deletes nothing.
    let dry = s
        .run(&["sweep", "--grace", "7d", "--dry-run", "--json"])
        .code(0)
        .json();
    assert_eq!(dry["would_delete"], 1);
    assert!(s.row("global", "orders:v1", "old-1").await.is_some());
    // Read-only refuses a real sweep, not a dry run.
    s.run(&["sweep", "--grace", "7d", "--read-only"])
        .code(EXIT_REFUSED);
    s.run(&["sweep", "--grace", "seven days"]).code(EXIT_USAGE);
    let swept = s
        .run(&["sweep", "--grace", "7d", "--batch", "1", "--json"])
        .code(0)
        .json();
    assert_eq!(swept["deleted"], 1);
    assert!(s.row("global", "orders:v1", "old-1").await.is_none());
    assert!(s.row("global", "orders:v1", "recent-1").await.is_some());
    assert!(
        s.run(&["sweep", "--grace", "30m"])
            .code(0)
            .stdout
            .contains("deleted 1")
    );
    assert!(s.row("global", "orders:v1", "recent-1").await.is_none());

    let doc = s.run(&["operations", "--json"]).code(0).json();
    let operations = doc["operations"].as_array().unwrap();
    let find = |id: &str| {
        operations
            .iter()
            .find(|o| o["operation"] == id)
            .unwrap_or_else(|| panic!("{id} in {doc:#}"))
    };
    let orders = find("orders:v1");
    assert_eq!(orders["registered"]["mode"], "atomic");
    assert_eq!(orders["registered"]["ttl_ms"], 86_400_000);
    assert_eq!(orders["registered"]["scope"], "global");
    assert_eq!(orders["counts"]["total"], 4);
    let pay = find("pay:v1");
    assert_eq!(pay["registered"]["mode"], "staged");
    assert_eq!(pay["registered"]["lease_ms"], 3_600_000);
    assert_eq!(pay["counts"]["stuck"], 3);
    assert_eq!(find("refunds:v1")["registered"], Value::Null);
    assert_eq!(find("unused:v2")["counts"]["total"], 0);
    assert!(s.run(&["operations"]).code(0).stdout.contains("unused:v2"));
}

/// `docs` renders the contracts services registered, from the database alone.
async fn docs_from_the_database<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    // Registered without a route (`Idem::register`): listed beside the paths.
    let api = s.run(&["docs", "--format", "openapi"]).code(0).json();
    assert_eq!(api["openapi"], "3.1.0");
    let unrouted = api["x-idempotency-operations"].to_string();
    for id in ["orders:v1", "pay:v1", "unused:v2"] {
        assert!(unrouted.contains(id), "{id} in {api:#}");
    }
    // With its route (`Idem::register_docs`): a path with the header and idem's responses.
    let doc = idem_runtime::docs::OperationDoc::from_spec(&ORDERS)
        .path("POST", "/orders")
        .responds(201, "created");
    s.idem.register_docs(&[doc]).await.unwrap();
    let api = s
        .run(&["docs", "--format", "openapi", "--json"])
        .code(0)
        .json();
    let post = &api["paths"]["/orders"]["post"];
    assert!(post["responses"]["201"].is_object(), "{api:#}");
    assert!(post["responses"]["422"].is_object(), "{api:#}");
    assert!(
        post["parameters"].to_string().contains("Idempotency-Key"),
        "{api:#}"
    );
    let markdown = s.run(&["docs"]).code(0).stdout.clone();
    assert!(markdown.contains("orders:v1"), "{markdown}");
    assert!(markdown.contains("Idempotency-Key"), "{markdown}");
    let wrapped = s.run(&["docs", "--json"]).code(0).json();
    assert_eq!(wrapped["format"], "markdown");
    assert_eq!(wrapped["document"], markdown.as_str());
    s.run(&["docs", "--format", "html"]).code(EXIT_USAGE);
}

/// The `dedup_id` fields of `outbox list`.
fn dedup_ids(doc: &Value) -> Vec<String> {
    doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["dedup_id"].as_str().unwrap().to_owned())
        .collect()
}

/// `outbox list`: every message with its state and the counts; `--dead`; `--limit`.
async fn outbox_lists_messages<DB: TestBackend>() {
    let s = OutboxSeeded::<DB>::new().await;
    let doc = s.run(&["outbox", "list", "--json"]).code(0).json();
    assert_eq!(dedup_ids(&doc), MESSAGES, "{doc:#}");
    assert_eq!(
        doc["counts"],
        serde_json::json!({
            "pending": 3, "in_flight": 1, "delivered": 2, "dead": 2, "total": 7,
            "oldest_pending_at": doc["counts"]["oldest_pending_at"],
        })
    );
    assert!(doc["counts"]["oldest_pending_at"].is_string());
    assert_eq!(doc["more"], false);
    let find = |dedup_id: &str| {
        doc["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["dedup_id"] == dedup_id)
            .unwrap()
            .clone()
    };
    let dead = find("dead-1");
    assert_eq!(dead["id"], s.ids["dead-1"]);
    assert_eq!(dead["topic"], "order.paid");
    assert_eq!(dead["status"], "dead");
    assert_eq!(dead["attempts"], 1);
    assert_eq!(dead["in_flight"], false);
    assert_eq!(
        dead["last_error"],
        "HTTP 503: the receiver is down for maintenance"
    );
    assert_eq!(dead["delivered_at"], Value::Null);
    assert!(dead.get("payload").is_none(), "listings leave payloads out");
    let in_flight = find("in-flight-1");
    assert_eq!(
        (&in_flight["status"], &in_flight["in_flight"]),
        (&Value::from("pending"), &Value::from(true))
    );
    assert!(in_flight["locked_until"].is_string());
    assert!(find("777")["delivered_at"].is_string());

    let dead = s
        .run(&["outbox", "list", "--dead", "--json"])
        .code(0)
        .json();
    assert_eq!(dedup_ids(&dead), ["dead-1", "dead-2"]);
    assert_eq!(dead["more"], false);
    let first = s
        .run(&["--json", "outbox", "list", "--limit", "2"])
        .code(0)
        .json();
    assert_eq!(dedup_ids(&first), ["dead-1", "dead-2"]);
    assert_eq!(first["more"], true);

    // For people: the counts, then the table.
    let text = s.run(&["outbox", "list"]).code(0).stdout.clone();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap().split(';').next().unwrap(),
        "outbox: 3 pending (1 in flight), 2 delivered, 2 dead"
    );
    let header = lines.next().unwrap();
    for column in [
        "ID",
        "DEDUP ID",
        "TOPIC",
        "STATUS",
        "ATTEMPTS",
        "NEXT ATTEMPT",
        "AGE",
        "LAST ERROR",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let line = |dedup_id: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(dedup_id))
            .unwrap_or_else(|| panic!("{dedup_id} in {text}"))
            .to_owned()
    };
    assert!(line("in-flight-1").contains("in flight"), "{text}");
    assert!(line("due-1").contains(" due "), "{text}");
    assert!(line("backoff-1").contains(" in 59m"), "{text}");
    assert!(line("dead-1").contains("HTTP 503"), "{text}");
    assert_eq!(text.lines().count(), 2 + MESSAGES.len(), "{text}");
    let text = s
        .run(&["outbox", "list", "--limit", "1"])
        .code(0)
        .stdout
        .clone();
    assert!(text.contains("more: 7 in all"), "{text}");
    assert!(
        s.run(&["outbox", "list", "--dead", "--limit", "1"])
            .code(0)
            .stdout
            .contains("more: 2 in all")
    );
    s.run(&["outbox", "list", "--limit", "0"]).code(EXIT_USAGE);
}

/// `outbox show`: by numeric id or dedup id, with the payload and the audit history.
async fn outbox_shows_a_message<DB: TestBackend>() {
    let s = OutboxSeeded::<DB>::new().await;
    let id = s.ids["dead-1"].to_string();
    let by_id = s.run(&["outbox", "show", &id, "--json"]).code(0).json();
    let by_dedup_id = s
        .run(&["outbox", "show", "dead-1", "--json"])
        .code(0)
        .json();
    assert_eq!(by_id, by_dedup_id);
    assert_eq!(by_id["dedup_id"], "dead-1");
    assert_eq!(
        by_id["payload"],
        serde_json::json!({"order": "dead-1", "total": 1990})
    );
    assert_eq!(by_id["audit"], serde_json::json!([]));
    // A dedup id that reads as a number but is no message's id.
    let numeric = s.run(&["outbox", "show", "777", "--json"]).code(0).json();
    assert_eq!(numeric["dedup_id"], "777");
    assert_eq!(numeric["status"], "delivered");

    let text = s
        .run(&["outbox", "show", "backoff-1"])
        .code(0)
        .stdout
        .clone();
    for expected in [
        "dedup id:",
        "backoff-1",
        "next attempt:",
        "in 59m",
        "HTTP 429",
        "payload:",
        "\"total\": 1990",
        "audit: no operator action",
    ] {
        assert!(text.contains(expected), "{expected} in {text}");
    }

    for missing in ["nope", "999999"] {
        let run = s.run(&["outbox", "show", missing, "--json"]);
        run.code(EXIT_NOT_FOUND);
        assert!(run.stderr.contains(missing), "{}", run.stderr);
        assert_eq!(run.json()["code"], EXIT_NOT_FOUND);
    }
    s.run(&["outbox", "show"]).code(EXIT_USAGE);
}

/// `outbox retry`: a dead message and one waiting for its backoff are sent again, audited
/// with the operator and the reason; one in flight, due or delivered is refused (4), a
/// missing one is 3, `--read-only` refuses (4) and changes nothing; `--all` retries every
/// one that applies.
async fn outbox_retries_are_audited<DB: TestBackend>() {
    let s = OutboxSeeded::<DB>::new().await;
    let table = s.table();
    let before = s.outbox().list(None, 100).await.unwrap();

    // Read-only: refused before anything is read.
    for args in [
        &["--read-only", "outbox", "retry", "dead-1"][..],
        &["outbox", "retry", "--all", "--read-only"][..],
        &["--read-only", "outbox", "retry", "nope"][..],
    ] {
        let run = s.run(args);
        run.code(EXIT_REFUSED);
        assert!(run.stderr.contains("read-only"), "{}", run.stderr);
    }
    // Usage: an id or --all, not both, not neither.
    s.run(&["outbox", "retry"]).code(EXIT_USAGE);
    s.run(&["outbox", "retry", "dead-1", "--all"])
        .code(EXIT_USAGE);
    // Refused on their state, and missing.
    for (dedup_id, why) in [
        ("in-flight-1", "being delivered"),
        ("due-1", "due already"),
        ("delivered-1", "delivered"),
    ] {
        let run = s.run(&["outbox", "retry", dedup_id, "--json"]);
        run.code(EXIT_REFUSED);
        assert!(run.stderr.contains(why), "{dedup_id}: {}", run.stderr);
        assert_eq!(run.json()["code"], EXIT_REFUSED);
    }
    s.run(&["outbox", "retry", "nope"]).code(EXIT_NOT_FOUND);
    assert_eq!(s.outbox().list(None, 100).await.unwrap(), before);
    assert!(table.audit(&AuditFilter::new()).await.unwrap().is_empty());

    // A dead message, by its id: pending, due now, attempts 0.
    let id = s.ids["dead-1"].to_string();
    let retried = s
        .run(&[
            "outbox",
            "retry",
            &id,
            "--operator",
            "alice",
            "--reason",
            "INC-7: receiver back",
            "--json",
        ])
        .code(0)
        .json();
    assert_eq!(retried["action"], "outbox-retry");
    assert_eq!(retried["operator"], "alice");
    assert_eq!(retried["reason"], "INC-7: receiver back");
    assert_eq!(retried["message"]["status"], "pending");
    assert_eq!(retried["message"]["attempts"], 0);
    let row = s.message("dead-1").await;
    assert_eq!((row.status, row.attempts), (OutboxStatus::Pending, 0));
    assert!(row.next_attempt_at_ms <= SystemClock.now_millis());
    // Audited, in the store and through the tool.
    let entries = table
        .audit(&AuditFilter::new().key(row.audit_key()))
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(
        (
            entry.operator.as_str(),
            entry.action.as_str(),
            entry.scope.as_str(),
            entry.operation.as_str(),
            entry.key.as_str(),
            entry.reason.as_deref(),
            entry.forced,
        ),
        (
            "alice",
            "outbox-retry",
            "outbox",
            "order.paid",
            "dead-1",
            Some("INC-7: receiver back"),
            false
        )
    );
    assert_eq!(entry.before.as_ref().unwrap()["status"], "dead");
    assert_eq!(entry.after.as_ref().unwrap()["status"], "pending");
    let shown = s
        .run(&["outbox", "show", "dead-1", "--json"])
        .code(0)
        .json();
    assert_eq!(shown["audit"][0]["action"], "outbox-retry");
    assert_eq!(shown["audit"][0]["operator"], "alice");
    let audit = s
        .run(&["audit", "--scope", "outbox", "--json"])
        .code(0)
        .json();
    assert_eq!(audit["audit"].as_array().unwrap().len(), 1);
    // Due now: a second retry is refused.
    s.run(&["outbox", "retry", "dead-1"]).code(EXIT_REFUSED);

    // Waiting for its backoff, by dedup id: due now, its attempts kept.
    let text = s
        .run(&["outbox", "retry", "backoff-1"])
        .code(0)
        .stdout
        .clone();
    assert!(text.starts_with("outbox-retry: message "), "{text}");
    assert!(text.contains("(by os-user)"), "{text}");
    let row = s.message("backoff-1").await;
    assert_eq!((row.status, row.attempts), (OutboxStatus::Pending, 1));

    // --all: the other dead message only, now.
    let all = s
        .run(&["outbox", "retry", "--all", "--reason", "sweep", "--json"])
        .code(0)
        .json();
    assert_eq!(all["retried"], 1);
    assert_eq!(all["all"], true);
    assert_eq!(s.message("dead-2").await.status, OutboxStatus::Pending);
    let text = s.run(&["outbox", "retry", "--all"]).code(0).stdout.clone();
    assert!(text.contains("nothing to retry"), "{text}");
    let entries = table.audit(&AuditFilter::new()).await.unwrap();
    let audited: Vec<(&str, Option<&str>)> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.reason.as_deref()))
        .collect();
    assert_eq!(
        audited,
        [
            ("dead-2", Some("sweep")),
            ("backoff-1", None),
            ("dead-1", Some("INC-7: receiver back")),
        ]
    );
    let counts = s.run(&["outbox", "list", "--json"]).json()["counts"].clone();
    assert_eq!(
        (counts["dead"].clone(), counts["pending"].clone()),
        (0.into(), 5.into())
    );
}

/// The (`id`, `source`) of each event of `inbox list` or `inbox show`.
fn events_of(doc: &Value) -> Vec<(String, String)> {
    doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let field = |name: &str| e[name].as_str().unwrap().to_owned();
            (field("id"), field("source"))
        })
        .collect()
}

/// `(id, source)` pairs, owned.
fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(id, source)| ((*id).to_owned(), (*source).to_owned()))
        .collect()
}

const PROVIDER: &str = "provider_event:v1";
const LEDGER: &str = "ledger_event:v1";

/// `inbox list`: waiting and unmatched events, the longest noted first, with their ages
/// and bodies; `--status`; `--limit`.
async fn inbox_lists_events<DB: TestBackend>() {
    let s = InboxSeeded::<DB>::new().await;
    let (min, hour) = (60_000, 3_600_000);
    let doc = s.run(&["--json", "inbox", "list"]).code(0).json();
    assert_eq!(
        events_of(&doc),
        pairs(&[
            ("evt_old", PROVIDER),
            ("evt_orphan", PROVIDER),
            ("evt_orphan", LEDGER),
            ("evt_early", PROVIDER),
        ]),
        "{doc:#}"
    );
    let orphan = &doc["events"][1];
    let stored = s.inbox().get("evt_orphan").await.unwrap();
    let row_id = stored.iter().find(|e| e.source == PROVIDER).unwrap().id;
    assert_eq!(orphan["row_id"], row_id);
    assert_eq!(orphan["status"], "unmatched");
    assert_eq!(orphan["deliveries"], 3);
    assert_eq!(orphan["reason"], "no payment names the charge ch_1");
    assert_eq!(orphan["first_seen_at"], rfc3339(s.now - 2 * hour));
    assert_eq!(orphan["last_seen_at"], rfc3339(s.now - 62 * min));
    assert_eq!(
        orphan["body"],
        serde_json::from_str::<Value>(ORPHAN_BODY).unwrap()
    );
    let age_ms = orphan["age_ms"].as_i64().unwrap();
    assert!(
        (2 * hour..2 * hour + 10 * min).contains(&age_ms),
        "{orphan}"
    );
    assert_eq!(orphan["age_seconds"], age_ms / 1000);
    let old = &doc["events"][0];
    assert_eq!(
        old["body"], "charge=ch_9; amount=500",
        "a body not JSON: its text"
    );
    assert!(old["age_seconds"].as_i64().unwrap() >= 26 * 3600, "{old}");
    assert_eq!(doc["events"][3]["status"], "waiting");

    let waiting = s
        .run(&["inbox", "list", "--status", "waiting", "--json"])
        .code(0)
        .json();
    assert_eq!(
        events_of(&waiting),
        pairs(&[("evt_orphan", LEDGER), ("evt_early", PROVIDER)])
    );
    let unmatched = s
        .run(&["inbox", "list", "--status", "unmatched", "--json"])
        .code(0)
        .json();
    assert_eq!(
        events_of(&unmatched),
        pairs(&[("evt_old", PROVIDER), ("evt_orphan", PROVIDER)])
    );
    let first = s
        .run(&["--json", "inbox", "list", "--limit", "2"])
        .code(0)
        .json();
    assert_eq!(
        events_of(&first),
        pairs(&[("evt_old", PROVIDER), ("evt_orphan", PROVIDER)])
    );

    // For people: a table, ages as the tool writes lengths of time.
    let text = s
        .run(&["--read-only", "inbox", "list"])
        .code(0)
        .stdout
        .clone();
    let header = text.lines().next().unwrap();
    for column in [
        "EVENT ID",
        "SOURCE",
        "STATUS",
        "AGE",
        "DELIVERIES",
        "REASON",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(
        cells(&text, "evt_old"),
        [
            "evt_old",
            PROVIDER,
            "unmatched",
            "1d2h",
            "1",
            "no payment names the charge ch_9"
        ],
        "{text}"
    );
    let early = cells(&text, "evt_early");
    assert_eq!(early[2], "waiting", "{text}");
    assert!(early[3].starts_with("5m"), "{text}");
    assert_eq!(text.lines().count(), 1 + 4, "{text}");
    assert!(!text.contains("may be more"), "{text}");
    let text = s
        .run(&["inbox", "list", "--status", "unmatched", "--limit", "1"])
        .code(0)
        .stdout
        .clone();
    assert_eq!(text.lines().count(), 1 + 1 + 1, "{text}");
    assert!(
        text.contains("the first 1 shown, there may be more"),
        "{text}"
    );
    for bad in [
        &["inbox", "list", "--status", "dead"][..],
        &["inbox", "list", "--limit", "0"][..],
        &["inbox", "list", "--limit", "1001"][..],
    ] {
        s.run(bad).code(EXIT_USAGE);
    }
}

/// `inbox show`: every source's event of an id, in full, its body pretty-printed; an
/// unknown id is not found (3).
async fn inbox_shows_an_event<DB: TestBackend>() {
    let s = InboxSeeded::<DB>::new().await;
    let doc = s
        .run(&["inbox", "show", "evt_orphan", "--json"])
        .code(0)
        .json();
    assert_eq!(
        events_of(&doc),
        pairs(&[("evt_orphan", LEDGER), ("evt_orphan", PROVIDER)])
    );
    let (ledger, provider) = (&doc["events"][0], &doc["events"][1]);
    assert_eq!(
        (&ledger["status"], &ledger["deliveries"]),
        (&Value::from("waiting"), &Value::from(1))
    );
    assert_eq!(ledger["reason"], "no ledger entry for the charge ch_1");
    assert_eq!(provider["status"], "unmatched");
    assert_eq!(provider["deliveries"], 3);
    assert_eq!(
        provider["body"],
        serde_json::from_str::<Value>(ORPHAN_BODY).unwrap()
    );
    let listed = s.run(&["inbox", "list", "--json"]).code(0).json();
    assert_eq!(provider["row_id"], listed["events"][1]["row_id"]);
    assert_eq!(
        provider["first_seen_at"],
        listed["events"][1]["first_seen_at"]
    );

    let text = s
        .run(&["inbox", "show", "evt_orphan"])
        .code(0)
        .stdout
        .clone();
    for expected in [
        "event id:",
        LEDGER,
        PROVIDER,
        "no ledger entry for the charge ch_1",
        "unmatched (acknowledged without being applied",
        &rfc3339(s.now - 2 * 3_600_000),
        "body:\n{\n",
        "    \"charge\": \"ch_1\"",
    ] {
        assert!(text.contains(expected), "{expected} in {text}");
    }
    let old = s.run(&["inbox", "show", "evt_old"]).code(0).stdout.clone();
    assert!(old.ends_with("body:\ncharge=ch_9; amount=500\n"), "{old}");

    let run = s.run(&["inbox", "show", "nope", "--json"]);
    run.code(EXIT_NOT_FOUND);
    assert!(
        run.stderr.contains("no inbox event with id \"nope\""),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["code"], EXIT_NOT_FOUND);
    s.run(&["inbox", "show", "nope"]).code(EXIT_NOT_FOUND);
    s.run(&["inbox", "show"]).code(EXIT_USAGE);
}

/// An id longer than 255 characters is kept as its digest: `inbox show` and `keys show`
/// take it raw as well as in its `sha256:` form.
async fn long_ids_are_found_raw<DB: TestBackend>() {
    let s = InboxSeeded::<DB>::new().await;
    let raw = format!("evt_{}", "x".repeat(300));
    let stored = IdempotencyKey::new(raw.as_str()).unwrap();
    assert!(stored.as_str().starts_with("sha256:"));
    let mut conn = s.idem.pool().acquire().await.unwrap();
    let delivery = idem_runtime::store::Delivery {
        source: PROVIDER,
        event_id: stored.as_str(),
        reason: "no payment names the charge ch_7",
        body: "{}",
    };
    idem_runtime::store::Inbox::<DB>::note(
        &mut conn,
        delivery,
        idem_runtime::store::InboxStatus::Unmatched,
        s.now,
        None,
    )
    .await
    .unwrap();
    drop(conn);
    for id in [raw.as_str(), stored.as_str()] {
        let doc = s.run(&["inbox", "show", id, "--json"]).code(0).json();
        assert_eq!(doc["events"][0]["id"], stored.as_str());
    }
    // A key likewise: looked up by its digest.
    let run = s.run(&[
        "keys",
        "show",
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        &"k".repeat(300),
    ]);
    run.code(EXIT_NOT_FOUND);
    let digest = IdempotencyKey::new("k".repeat(300)).unwrap();
    assert!(run.stderr.contains(digest.as_str()), "{}", run.stderr);
    // Stored through the runtime, the long key is found by its raw form.
    let call = idem_runtime::protocol::Call {
        scope: "global",
        key: &digest,
        fingerprint: idem_runtime::fingerprint::Fingerprint::of(ORDERS.id, &json!({}), &[])
            .unwrap(),
        request: None,
    };
    let record =
        idem_runtime::protocol::Record::json(http::StatusCode::CREATED, &json!({"order": 1}))
            .unwrap();
    let work = idem_runtime::protocol::work_fn::<DB, _>(move |_tx| Box::pin(async move { record }));
    s.idem.execute(&ORDERS, call, work).await.unwrap();
    let long = "k".repeat(300);
    let args = key_args("global", ORDERS.id, &long);
    let doc = s.run(&with(&["keys", "show", "--json"], args.to_vec(), &[]));
    assert_eq!(doc.code(0).json()["key"], digest.as_str());
}

/// `ms` as the tool writes times: RFC 3339 UTC with milliseconds.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// The cells of the line of a table that shows `key` (columns are two spaces apart).
fn cells<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.split("  ").any(|c| c.trim() == key))
        .unwrap_or_else(|| panic!("{key} in {text}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// One rule for when a key expires, in the table, `keys show` and the JSON: a key that is
/// not final (processing or stuck) shows no expiry, whatever its `expires_at` column says.
async fn only_final_keys_expire<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    let now = SystemClock.now_millis();

    // The table: `-` for the running and the stuck keys, `in …` or `… ago` for the others.
    let text = s.run(&["keys", "list"]).code(0).stdout.clone();
    let header: Vec<&str> = text.lines().next().unwrap().split("  ").collect();
    assert!(header.contains(&"EXPIRES"), "{text}");
    for key in ["s-running", "s-stuck-1", "s-stuck-2", "s-stuck-3"] {
        let cells = cells(&text, key);
        assert_eq!(cells.len(), 6, "{cells:?}: no response, so EXPIRES is last");
        assert_eq!(cells[5], "-", "{key}: {cells:?}");
    }
    let a1 = cells(&text, "a-1");
    assert!(a1[5].starts_with("in 23h") || a1[5] == "in 1d", "{a1:?}");
    assert!(cells(&text, "old-1")[5].ends_with(" ago"), "{text}");

    // The JSON keeps the column and says when each key expires by the same rule.
    let doc = s.run(&["keys", "list", "--json"]).code(0).json();
    for key in doc["keys"].as_array().unwrap() {
        let expires_in = &key["expires_in_ms"];
        assert!(key["expires_at"].is_string(), "{key}");
        match key["status"].as_str().unwrap() {
            "processing" | "stuck" => assert_eq!(expires_in, &Value::Null, "{key}"),
            "completed" => assert!(expires_in.as_i64().unwrap() > 0, "{key}"),
            "expired" => assert!(expires_in.as_i64().unwrap() <= 0, "{key}"),
            other => panic!("{other}"),
        }
    }
    let a1_json = doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "a-1")
        .unwrap();
    let a1_row = s.row("global", "orders:v1", "a-1").await.unwrap();
    let expires_in = a1_json["expires_in_ms"].as_i64().unwrap();
    assert!(
        (a1_row.expires_at_ms - now - 60_000..=a1_row.expires_at_ms - now).contains(&expires_in),
        "{expires_in} for {a1_row:?}"
    );

    // `keys show`: the same, in words and in JSON.
    let pay = |k: &'static str| -> Vec<&'static str> {
        vec![
            "--scope",
            "tenant:acme",
            "--operation",
            "pay:v1",
            "--key",
            k,
        ]
    };
    for key in ["s-running", "s-stuck-1"] {
        let text = s
            .run(&with(&["keys", "show"], pay(key), &[]))
            .code(0)
            .stdout
            .clone();
        let expires = text.lines().find(|l| l.starts_with("expires:")).unwrap();
        assert_eq!(
            expires, "expires:         - (not final: its TTL counts from its completion)",
            "{text}"
        );
        let json = s
            .run(&with(&["keys", "show", "--json"], pay(key), &[]))
            .code(0)
            .json();
        assert_eq!(json["expires_in_ms"], Value::Null, "{json:#}");
        assert_eq!(
            json["expires_at"],
            rfc3339(
                s.row("tenant:acme", "pay:v1", key)
                    .await
                    .unwrap()
                    .expires_at_ms
            )
        );
    }
    let text = s
        .run(&[
            "keys",
            "show",
            "--scope",
            "global",
            "--operation",
            "orders:v1",
            "--key",
            "a-1",
        ])
        .code(0)
        .stdout
        .clone();
    let expires = text.lines().find(|l| l.starts_with("expires:")).unwrap();
    assert!(
        expires.contains(&format!("{} (in 23h", rfc3339(a1_row.expires_at_ms)))
            || expires.contains(&format!("{} (in 1d)", rfc3339(a1_row.expires_at_ms))),
        "{text}"
    );

    // An action's before and after: released, the stuck key is still not final.
    let released = s
        .run(&with(&["keys", "release", "--json"], pay("s-stuck-1"), &[]))
        .code(0)
        .json();
    assert_eq!(released["before"]["expires_in_ms"], Value::Null);
    assert_eq!(released["after"]["expires_in_ms"], Value::Null);
    assert!(released["after"]["expires_at"].is_string());
}

/// A refusal gives times, not milliseconds since the Unix epoch: an expired key's expiry
/// (idem-store's `NotApplicable` words) and a running key's lease (its `Hazard`).
async fn refusals_give_times<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    let old = s.row("global", "orders:v1", "old-1").await.unwrap();
    let refused = s.run(&[
        "keys",
        "expire",
        "--scope",
        "global",
        "--operation",
        "orders:v1",
        "--key",
        "old-1",
        "--json",
    ]);
    refused.code(EXIT_REFUSED);
    let said = format!(
        "refused: not applicable: expire: the key expired already (at {})",
        rfc3339(old.expires_at_ms)
    );
    assert_eq!(refused.stderr.trim(), format!("idem: {said}"));
    assert_eq!(refused.json()["error"], said.as_str());

    let running = s.row("tenant:acme", "pay:v1", "s-running").await.unwrap();
    let lease = rfc3339(running.locked_until_ms.unwrap());
    let refused = s.run(&[
        "keys",
        "release",
        "--scope",
        "tenant:acme",
        "--operation",
        "pay:v1",
        "--key",
        "s-running",
        "--json",
    ]);
    refused.code(EXIT_REFUSED);
    let error = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(error.contains(&format!("live until {lease}:")), "{error}");
    for said in [&error, &refused.stderr] {
        let epoch = running.locked_until_ms.unwrap().to_string();
        assert!(!said.contains(&epoch), "{said}");
        assert!(!said.contains("ms since"), "{said}");
    }
}

/// The arguments that name `key` of `operation` in `scope`.
fn key_args<'a>(scope: &'a str, operation: &'a str, key: &'a str) -> [&'a str; 6] {
    ["--scope", scope, "--operation", operation, "--key", key]
}

/// Asserts that `text` holds neither [`SEALED_SECRET`] nor its hexadecimal.
#[track_caller]
fn no_secret(text: &str) {
    let hex: String = SEALED_SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        !text.contains(SEALED_SECRET) && !text.contains(&hex),
        "{text}"
    );
}

/// Sealed keys without the storage keys: listed, shown as `sealed (key k1)` (text, JSON,
/// journal, `--body`), acted on (but for a response with a body, refused), audited without
/// their values; with the keys (`--storage-keys` or `IDEM_STORAGE_KEYS`) shown whole, and
/// completed with a sealed response. Malformed keys exit 2 without showing a key.
async fn sealed_keys_are_shown_as_sealed<DB: TestBackend>() {
    let s = SealedSeeded::<DB>::new().await;
    let listed = s.run(&["keys", "list", "--json"]).code(0).json();
    let sealed: Vec<(String, Value)> = (listed["keys"].as_array().unwrap().iter())
        .map(|k| (k["key"].as_str().unwrap().to_owned(), k["sealed"].clone()))
        .collect();
    assert_eq!(
        sealed,
        [
            ("clear-1".to_owned(), Value::Null),
            ("sealed-1".to_owned(), json!("k1")),
            ("sealed-2".to_owned(), json!("k1")),
            ("s-1".to_owned(), json!("k1")),
            ("s-2".to_owned(), json!("k1")),
        ]
    );

    let sealed_1 = key_args("global", ORDERS.id, "sealed-1");
    let shown = s
        .run(&with(&["keys", "show"], sealed_1.to_vec(), &[]))
        .exited(0);
    no_secret(&shown.stdout);
    // `idem show`, the shortcut, says the same.
    let short = s.run(&with(&["show"], sealed_1.to_vec(), &[])).exited(0);
    assert_eq!(short.stdout, shown.stdout);
    assert!(
        shown
            .stdout
            .contains("\n  body:          sealed (key k1)\n"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .contains("\nfingerprint:     sealed (key k1)\n"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .contains("\nsealed:          key k1, not opened"),
        "{}",
        shown.stdout
    );
    let doc = s
        .run(&with(&["keys", "show", "--json"], sealed_1.to_vec(), &[]))
        .code(0)
        .json();
    assert_eq!(
        (&doc["sealed"], &doc["opened"]),
        (&json!("k1"), &json!(false))
    );
    assert_eq!(
        (&doc["response"], &doc["fingerprint"]),
        (&json!({"status": 201}), &Value::Null)
    );
    // With the keys, as a flag or from the environment: the body, and that it was sealed.
    for (flag, env) in [
        (&["--storage-keys", K1][..], &[][..]),
        (&[][..], &[("IDEM_STORAGE_KEYS", K1)][..]),
    ] {
        let args = with(&["keys", "show"], sealed_1.to_vec(), flag);
        let opened = s.run_with(&args, None, env).exited(0);
        assert!(opened.stdout.contains(SEALED_SECRET), "{}", opened.stdout);
        assert!(
            opened.stdout.contains("\nsealed:          key k1\n"),
            "{}",
            opened.stdout
        );
        let args = with(&["keys", "show", "--json"], sealed_1.to_vec(), flag);
        let doc = s.run_with(&args, None, env).code(0).json();
        assert_eq!(
            (&doc["sealed"], &doc["opened"]),
            (&json!("k1"), &json!(true))
        );
        assert!(
            doc["response"]["body"]
                .as_str()
                .unwrap()
                .contains(SEALED_SECRET)
        );
    }
    // A keyring without k1: as without the keys.
    let args = with(
        &["keys", "show", "--storage-keys", K2],
        sealed_1.to_vec(),
        &[],
    );
    let other = s.run(&args).exited(0);
    assert!(
        other.stdout.contains("  body:          sealed (key k1)"),
        "{}",
        other.stdout
    );

    // A staged key's journal and request; its field digests.
    let s_1 = key_args("tenant:acme", "pay:v1", "s-1");
    let shown = s.run(&with(&["keys", "show"], s_1.to_vec(), &[])).exited(0);
    assert!(
        shown
            .stdout
            .contains("\njournal and request: sealed (key k1)\n"),
        "{}",
        shown.stdout
    );
    assert!(!shown.stdout.contains("ch_"), "{}", shown.stdout);
    let compared = s.run_with(
        &with(&["keys", "show", "--body", "-"], s_1.to_vec(), &[]),
        Some(br#"{"amount": 100}"#),
        &[],
    );
    compared.code(EXIT_USAGE);
    assert!(
        compared.stderr.contains("--body: ")
            && compared.stderr.contains("sealed under storage key `k1`"),
        "{}",
        compared.stderr
    );
    let compared = s.run_with(
        &with(
            &["keys", "show", "--body", "-", "--storage-keys", K1],
            s_1.to_vec(),
            &[],
        ),
        Some(br#"{"amount": 100}"#),
        &[],
    );
    // (A staged key keeps its input's fields at the root: compared, as added.)
    assert!(
        compared
            .code(0)
            .stdout
            .contains("\n  added    /body/amount\n"),
        "{}",
        compared.stdout
    );

    // Actions without the keys.
    s.run(&with(
        &["keys", "expire"],
        sealed_1.to_vec(),
        &["--reason", "INC-9"],
    ))
    .code(0);
    let refused = s.run_with(
        &with(
            &["keys", "fail"],
            s_1.to_vec(),
            &["--status", "502", "--body", "-"],
        ),
        Some(SEALED_SECRET.as_bytes()),
        &[],
    );
    refused.code(EXIT_USAGE);
    assert!(
        refused.stderr.contains("--storage-keys"),
        "{}",
        refused.stderr
    );
    no_secret(&refused.stderr);
    s.run(&with(&["keys", "fail"], s_1.to_vec(), &["--status", "502"]))
        .code(0);
    // With the keys, a response stored sealed.
    let s_2 = key_args("tenant:acme", "pay:v1", "s-2");
    let completed = s.run_with(
        &with(
            &["--storage-keys", K1, "keys", "complete", "--json"],
            s_2.to_vec(),
            &[
                "--status",
                "201",
                "--body",
                "-",
                "--header",
                "Content-Type: application/json",
            ],
        ),
        Some(format!(r#"{{"settled":"{SEALED_SECRET}"}}"#).as_bytes()),
        &[],
    );
    let doc = completed.code(0).json();
    assert_eq!(doc["after"]["sealed"], "k1");
    assert!(
        doc["after"]["response"]["body"]
            .as_str()
            .unwrap()
            .contains(SEALED_SECRET)
    );
    let shown = s.run(&with(&["keys", "show"], s_2.to_vec(), &[])).exited(0);
    no_secret(&shown.stdout);
    let audit = s.run(&["audit", "--json"]).exited(0);
    no_secret(&audit.stdout);
    let entries = audit.json()["audit"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 3, "expire, fail, complete");
    for entry in &entries {
        assert_eq!(entry["before"]["sealed"], "k1", "{entry:#}");
        assert!(entry["before"].get("fingerprint").is_none(), "{entry:#}");
    }

    // Malformed keys: exit 2, never a key.
    let secret = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    for (keys, says) in [
        ("k1:c2hvcnQ=", "storage key `k1`"),
        (
            &format!("{secret}:k1")[..],
            "storage key entry 1: expected an id",
        ),
        (&format!("{K1},{K1}")[..], "given twice"),
        (secret, "storage key entry 1: expected ID:BASE64"),
        ("", "no storage key"),
    ] {
        for (flag, env) in [
            (vec!["--storage-keys", keys], vec![]),
            (vec![], vec![("IDEM_STORAGE_KEYS", keys)]),
        ] {
            let run = s.run_with(&[&flag[..], &["keys", "list"]].concat(), None, &env);
            run.code(EXIT_USAGE);
            assert!(run.stderr.contains(says), "{keys:?}: {}", run.stderr);
            assert!(!run.stderr.contains(secret), "{}", run.stderr);
        }
    }
}

/// `keys reseal`: needs the keys (2) and writes (4 with --read-only); moves every key to
/// the first key given, from `--after` on and then from the start, audited without a
/// value; afterwards the new key alone opens them.
async fn reseal_moves_keys_to_the_new_key<DB: TestBackend>() {
    let s = SealedSeeded::<DB>::new().await;
    let both = format!("{K2},{K1}");
    let refused = s.run(&["keys", "reseal"]);
    refused.code(EXIT_USAGE);
    assert!(
        refused.stderr.contains("--storage-keys"),
        "{}",
        refused.stderr
    );
    s.run(&["--read-only", "--storage-keys", &both, "keys", "reseal"])
        .code(EXIT_REFUSED);
    s.run(&["--storage-keys", &both, "keys", "reseal", "--after", "zz"])
        .code(EXIT_USAGE);

    // From after the first key, two at a time; then from the start.
    let first = s
        .run(&["keys", "list", "--limit", "1", "--json"])
        .code(0)
        .json();
    let after = first["next"].as_str().unwrap().to_owned();
    let args = [
        "--storage-keys",
        &both,
        "keys",
        "reseal",
        "--batch",
        "2",
        "--after",
        &after,
    ];
    let run = s
        .run(&[&args[..], &["--json", "--reason", "CHG-7"]].concat())
        .exited(0);
    let doc = run.json();
    assert_eq!(
        (&doc["resealed"], &doc["current"], &doc["batches"]),
        (&json!(4), &json!(0), &json!(3))
    );
    assert_eq!(
        (&doc["storage_key"], &doc["skipped"]),
        (&json!("k2"), &json!({}))
    );
    assert!(run.stderr.contains("; done"), "{}", run.stderr);
    let run = s
        .run(&["--storage-keys", &both, "keys", "reseal"])
        .exited(0);
    assert!(
        run.stdout
            .starts_with("resealed 1 key under storage key k2; 4 keys already under it"),
        "{}",
        run.stdout
    );
    // Keys given without k1: nothing is left under it, so k2 alone opens every key.
    let run = s
        .run(&["--storage-keys", K2, "keys", "reseal", "--json"])
        .exited(0);
    assert_eq!(run.json()["current"], 5);
    for (scope, operation, key) in [
        ("global", ORDERS.id, "sealed-2"),
        ("global", ORDERS.id, "clear-1"),
    ] {
        let args = key_args(scope, operation, key);
        let shown = s.run(&with(
            &["--storage-keys", K2, "keys", "show", "--json"],
            args.to_vec(),
            &[],
        ));
        let doc = shown.code(0).json();
        assert_eq!(
            (&doc["sealed"], &doc["opened"]),
            (&json!("k2"), &json!(true)),
            "{key}"
        );
        let shown = s.run(&with(
            &["--storage-keys", K1, "keys", "show"],
            args.to_vec(),
            &[],
        ));
        assert!(
            shown
                .code(0)
                .stdout
                .contains("  body:          sealed (key k2)"),
            "{key}"
        );
    }
    let shown = s.run(&with(
        &["--storage-keys", K2, "keys", "show"],
        key_args("global", ORDERS.id, "sealed-2").to_vec(),
        &[],
    ));
    assert!(
        shown.code(0).stdout.contains(SEALED_SECRET),
        "{}",
        shown.stdout
    );
    let audit = s.run(&["audit", "--json"]).exited(0);
    no_secret(&audit.stdout);
    let entries = audit.json()["audit"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 5, "one reseal per key");
    assert!(
        entries
            .iter()
            .all(|e| e["action"] == "reseal" && e["after"]["sealed"] == "k2")
    );
}

/// `keys reseal` over a sealed key whose response marker (`response_headers`) was changed
/// by one byte: reported unreadable by its key, left as it is (its sealed body is not sealed
/// again as if it were clear), the other keys resealed.
async fn reseal_reports_a_changed_marker<DB: TestBackend>() {
    use idem_runtime::store::Arg;
    let s = SealedSeeded::<DB>::new().await;
    let (p1, p2) = if DB::DIALECT.positional {
        ("?", "?")
    } else {
        ("$1", "$2")
    };
    let (select, update) = (
        format!("SELECT response_body FROM idempotency_keys WHERE idempotency_key = {p1}"),
        format!("UPDATE idempotency_keys SET response_headers = {p1} WHERE idempotency_key = {p2}"),
    );
    let mut conn = s.idem.pool().acquire().await.unwrap();
    let changed = [Arg::Text("idem-sealed:v1:k1;"), Arg::Text("sealed-2")];
    assert_eq!(DB::execute(&mut conn, &update, &changed).await.unwrap(), 1);
    let body = |row: Option<DB::Row>| DB::bytes(&row.unwrap(), 0).unwrap();
    let key = [Arg::Text("sealed-2")];
    let before = body(DB::fetch_optional(&mut conn, &select, &key).await.unwrap());
    let both = format!("{K2},{K1}");
    let run = s
        .run(&["--storage-keys", &both, "keys", "reseal", "--json"])
        .exited(0);
    no_secret(&run.stdout);
    let doc = run.json();
    let unreadable = doc["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{doc:#}");
    assert!(
        unreadable[0].as_str().unwrap().contains("sealed-2"),
        "{doc:#}"
    );
    assert_eq!(doc["resealed"], 4, "{doc:#}");
    let after = body(DB::fetch_optional(&mut conn, &select, &key).await.unwrap());
    assert_eq!(after, before, "the row is left as it is");
    let text = s
        .run(&["--storage-keys", &both, "keys", "reseal"])
        .exited(0);
    assert!(text.stdout.contains("sealed-2"), "{}", text.stdout);
}

/// The provider key the staged seeding's work received for its `charge` step: its result,
/// `ch_` and that key, as the journal of `doc` (`keys show --json`) records it.
fn charge_key_sent(doc: &Value) -> String {
    let recorded = doc["journal"]["charge"].as_str().unwrap();
    recorded.strip_prefix("ch_").unwrap().to_owned()
}

/// `keys show` gives each recorded step's provider key, the one the runtime sent, to search
/// the provider's dashboard with: `provider_keys` in JSON (`null` for an atomic key), a
/// `provider keys:` block in text (nothing for an atomic key).
async fn show_gives_each_steps_provider_key<DB: TestBackend>() {
    let s = Seeded::<DB>::new().await;
    for key in ["s-done", "s-stuck-1"] {
        let pay = key_args("tenant:acme", "pay:v1", key);
        let doc = s
            .run(&with(&["keys", "show", "--json"], pay.to_vec(), &[]))
            .code(0)
            .json();
        let sent = charge_key_sent(&doc);
        assert!(sent.starts_with("idem_"), "{doc:#}");
        assert_eq!(doc["provider_keys"], json!({"charge": sent}), "{key}");
        assert_eq!(doc["provider_keys_sealed"], Value::Null, "{key}");
        let text = s.run(&with(&["keys", "show"], pay.to_vec(), &[])).exited(0);
        let block = format!("\nprovider keys:\n  charge: {sent}\n");
        assert!(
            text.stdout.contains(&block),
            "{block:?} in\n{}",
            text.stdout
        );
    }
    // Another key of the operation was reserved apart: its own provider key.
    let stuck = |key| {
        let pay = key_args("tenant:acme", "pay:v1", key);
        s.run(&with(&["keys", "show", "--json"], pay.to_vec(), &[]))
            .code(0)
            .json()
    };
    assert_ne!(
        stuck("s-stuck-1")["provider_keys"],
        stuck("s-stuck-2")["provider_keys"]
    );

    let a1 = key_args("global", "orders:v1", "a-1");
    let atomic = s
        .run(&with(&["keys", "show", "--json"], a1.to_vec(), &[]))
        .code(0)
        .json();
    assert_eq!(atomic["provider_keys"], Value::Null);
    let text = s.run(&with(&["keys", "show"], a1.to_vec(), &[])).exited(0);
    assert!(!text.stdout.contains("provider keys"), "{}", text.stdout);
}

/// A staged key whose journal is sealed under a storage key the tool was not given: its
/// steps, and so their provider keys, are said to be sealed; with the keys, shown.
async fn sealed_steps_hide_their_provider_keys<DB: TestBackend>() {
    let s = SealedSeeded::<DB>::new().await;
    let s_1 = key_args("tenant:acme", "pay:v1", "s-1");
    let text = s.run(&with(&["keys", "show"], s_1.to_vec(), &[])).exited(0);
    assert!(
        text.stdout
            .contains("\nprovider keys: steps sealed (key k1)\n"),
        "{}",
        text.stdout
    );
    let doc = s
        .run(&with(&["keys", "show", "--json"], s_1.to_vec(), &[]))
        .code(0)
        .json();
    assert_eq!(
        (&doc["provider_keys"], &doc["provider_keys_sealed"]),
        (&Value::Null, &json!("k1"))
    );
    let opened = with(
        &["keys", "show", "--json"],
        s_1.to_vec(),
        &["--storage-keys", K1],
    );
    let doc = s.run(&opened).code(0).json();
    assert_eq!(
        doc["provider_keys"],
        json!({"charge": charge_key_sent(&doc)})
    );
    assert_eq!(doc["provider_keys_sealed"], Value::Null);
}

// The tool reads and acts on every store's key table.
idem_testkit::on_every_store!(
    show_gives_each_steps_provider_key,
    sealed_steps_hide_their_provider_keys,
    sealed_keys_are_shown_as_sealed,
    reseal_moves_keys_to_the_new_key,
    reseal_reports_a_changed_marker,
    only_final_keys_expire,
    refusals_give_times,
    outbox_lists_messages,
    outbox_shows_a_message,
    outbox_retries_are_audited,
    inbox_lists_events,
    inbox_shows_an_event,
    long_ids_are_found_raw,
    docs_from_the_database,
    lists_filter_and_paginate,
    show_tells_everything,
    show_compares_a_body,
    actions_are_fenced_and_audited,
    stats_sweep_and_operations,
);

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| (*a).to_owned()).collect()
}

/// A password in the URL never reaches the output, whatever fails.
#[test]
fn passwords_are_never_printed() {
    for url in [
        "postgres://alice:hunter2secret@127.0.0.1:1/db",
        "postgres://alice@127.0.0.1:1/db?password=hunter2secret",
        "postgres://alice:hunter2secret@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write",
    ] {
        // (An unreachable server: each run waits for the pool's connect timeout.)
        let run = idem(&args(&["--database-url", url, "stats", "--json"]), None);
        run.code(1);
        assert!(run.stderr.contains("127.0.0.1:1"), "{}", run.stderr);
        assert!(!run.stderr.contains("hunter2secret"), "{}", run.stderr);
        assert!(!run.stdout.contains("hunter2secret"), "{}", run.stdout);
        assert_eq!(run.json()["code"], 1);
    }
}

/// A host list with the standby first: the tool reads and acts on the host
/// `target_session_attrs=read-write` asks for, the primary.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_list_reaches_the_primary() {
    use idem_runtime::fingerprint::Fingerprint;
    use idem_runtime::protocol::{Call, Record, work_fn};
    use idem_runtime::spec::OperationSpec;
    use idem_runtime::sqlx::Postgres;
    use idem_runtime::{Config, Idem, IdempotencyKey};
    use idem_testkit::failover::Failover;

    const SPEC: OperationSpec = OperationSpec::new("orders:v1");
    let rig = Failover::start(true);
    let idem = Idem::<Postgres>::connect(
        &Failover::url_of(rig.primary_port, "test"),
        Config::default(),
    )
    .await
    .unwrap();
    idem.migrate().await.unwrap();
    let key = IdempotencyKey::new("k-1").unwrap();
    let call = Call {
        scope: "global",
        key: &key,
        fingerprint: Fingerprint::of(SPEC.id, &serde_json::json!({}), &[]).unwrap(),
        request: None,
    };
    let work = work_fn::<Postgres, _>(|_tx| {
        Box::pin(async {
            Record::json(http::StatusCode::CREATED, &serde_json::json!({"order": 1})).unwrap()
        })
    });
    idem.execute(&SPEC, call, work).await.unwrap();

    let list = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/test?target_session_attrs=read-write",
        rig.standby_port, rig.primary_port
    );
    let db = ["--database-url", list.as_str()];
    let listed = idem_tool(&[&db[..], &["keys", "list", "--json"]].concat());
    assert_eq!(keys_of(&listed.code(0).json()), ["k-1"]);
    let key = ["--scope", "global", "--operation", SPEC.id, "--key", "k-1"];
    // A write, which a standby refuses.
    idem_tool(&[&db[..], &["keys", "expire"], &key[..]].concat()).code(0);
    let shown = idem_tool(&[&db[..], &["keys", "show", "--json"], &key[..]].concat());
    assert_eq!(shown.code(0).json()["status"], "expired");
    idem.close().await;
}

/// `idem ARGS`.
fn idem_tool(list: &[&str]) -> common::Run {
    idem(&args(list), None)
}

/// Usage errors exit 2; so does no command without a terminal.
#[test]
fn usage_errors_exit_2() {
    let db = ["--database-url", "sqlite:nowhere.db"];
    for bad in [
        &["stats"][..],
        &[&db[..], &["keys", "show", "--scope", "global"]].concat(),
        &[&db[..], &["keys", "list", "--limit", "0"]].concat(),
        &[&db[..], &["keys", "frobnicate"]].concat(),
        &[
            &db[..],
            &[
                "keys",
                "complete",
                "--scope",
                "g",
                "--operation",
                "o",
                "--key",
                "k",
                "--status",
                "abc",
            ],
        ]
        .concat(),
        &db[..],
        &["--database-url", "mongodb://root:pw@localhost/db", "stats"],
        &[&db[..], &["--schema", "app", "stats"]].concat(),
    ] {
        idem(&args(bad), None).code(EXIT_USAGE);
    }
}
