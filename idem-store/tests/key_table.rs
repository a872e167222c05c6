//! The key table's generic cases beyond the conformance kit (`tests/common`, and listings by
//! key prefix here), on every store whose feature is on.
#![allow(clippy::unwrap_used)]

mod common;

#[allow(unused_imports)]
use common::{table_size_is_reported, upgrade_from_sqlx_layout};
use idem_store::{KeyFilter, KeyRef};
use idem_testkit::conformance::put;
use idem_testkit::harness::{HOUR, NOW, TestBackend};

/// A key prefix matches keys that start with it, letter for letter: the wildcards of the
/// store's pattern language (`%`, `_`) and its escape (`!`) in a prefix match only
/// themselves, not other characters; the empty prefix matches every key.
async fn key_prefixes_match_wildcards_literally<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let keys = [
        "a%b_c!d",
        "a%b_c!d-2",
        // What `%`, `_` or `!d` would match as a wildcard or an escape.
        "aXYb_c!d",
        "a%bZc!d",
        "a%b_cd",
        "a%b_c!!d",
        "A%b_c!d",
        "a!%b_c!d",
    ];
    for k in keys {
        let k = KeyRef {
            scope: "global",
            operation: "op:v1",
            key: k,
        };
        assert!(put(table.pool(), k, NOW, NOW + HOUR, b"").await);
    }
    let listed = async |prefix: &str| {
        let page = table
            .list(&KeyFilter::new().key_prefix(prefix), NOW)
            .await
            .unwrap();
        let mut keys: Vec<String> = page.keys.into_iter().map(|row| row.key).collect();
        keys.sort();
        keys
    };
    assert_eq!(listed("a%b_c!d").await, ["a%b_c!d", "a%b_c!d-2"]);
    let mut every = keys.map(str::to_owned).to_vec();
    every.sort();
    assert_eq!(listed("").await, every);
}

idem_testkit::on_every_store!(
    // Not on MySQL: idem 0.1, whose sqlx layout this upgrades from, had no MySQL store.
    upgrade_from_sqlx_layout [postgres, sqlite],
    table_size_is_reported,
    key_prefixes_match_wildcards_literally,
);
