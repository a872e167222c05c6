//! Host lists on a real primary and its streaming standby (`.ci/failover`): which host each
//! `target_session_attrs` value takes, hosts that refuse or never answer, and a pool that
//! follows a promotion without being opened again.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::net::TcpListener;
use std::str::FromStr;
use std::time::{Duration, Instant};

use idem_store::TxSettings;
use idem_store::hosts::HostList;
use idem_store::sqlx::postgres::{PgConnectOptions, PgConnection};
use idem_store::sqlx::{self, Postgres};
use idem_testkit::failover::Failover;

fn list(hosts: &[u16], query: &str) -> HostList {
    let hosts: Vec<String> = hosts
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let url = format!("postgres://postgres@{}/test?{query}", hosts.join(","));
    HostList::parse(&url, PgConnectOptions::from_str).unwrap()
}

/// The port of the server `conn` is on.
async fn port(conn: &mut PgConnection) -> u16 {
    let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
        .fetch_one(conn)
        .await
        .unwrap();
    u16::try_from(port).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_target_session_attrs_value_takes_its_host() {
    let rig = Failover::start(false);
    let (p, s) = (rig.primary_port, rig.standby_port);
    for (attrs, hosts, want) in [
        ("any", [p, s], p),
        ("any", [s, p], s),
        ("read-write", [s, p], p),
        ("primary", [s, p], p),
        ("read-only", [p, s], s),
        ("standby", [p, s], s),
        ("prefer-standby", [p, s], s),
        ("prefer-standby", [s, p], s),
    ] {
        let list = list(&hosts, &format!("target_session_attrs={attrs}"));
        let (index, mut conn) = list.connect().await.unwrap();
        assert_eq!(port(&mut conn).await, want, "{attrs} on {hosts:?}");
        assert_eq!(hosts[index], want, "{attrs} on {hosts:?}");
    }
    // With no standby, `prefer-standby` takes what there is; `standby` nothing.
    let (_, mut conn) = list(&[p], "target_session_attrs=prefer-standby")
        .connect()
        .await
        .unwrap();
    assert_eq!(port(&mut conn).await, p);
    for (attrs, host, says) in [
        ("standby", p, "a primary"),
        ("read-only", p, "a primary"),
        ("read-write", s, "a standby"),
        ("primary", s, "a standby"),
    ] {
        let error = list(&[host], &format!("target_session_attrs={attrs}"))
            .connect()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("no host is target_session_attrs={attrs}"))
                && error.contains(says),
            "{attrs}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_that_refuse_or_never_answer_are_passed_over() {
    let rig = Failover::start(false);
    // A port nothing listens on: refused at once.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A port that takes the connection and never answers: `connect_timeout` passes it.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();

    let started = Instant::now();
    let (index, mut conn) = list(
        &[closed, silent_port, rig.primary_port],
        "target_session_attrs=read-write&connect_timeout=2",
    )
    .connect()
    .await
    .unwrap();
    assert_eq!((index, port(&mut conn).await), (2, rig.primary_port));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(8),
        "{waited:?}"
    );

    let error = list(&[closed, silent_port], "connect_timeout=2")
        .connect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("no host is reachable")
            && error.contains(&format!("127.0.0.1:{closed}: "))
            && error.contains(&format!(
                "127.0.0.1:{silent_port}: no answer within connect_timeout (2 s)"
            )),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_follows_the_promoted_standby() {
    let rig = Failover::start(true);
    let settings = TxSettings {
        lock_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(5),
        acquire_timeout: Duration::from_millis(500),
    };
    let pool = idem_store::connect::connect::<Postgres>(&rig.url, 4, &settings)
        .await
        .unwrap();
    let on = |pool: &sqlx::PgPool| {
        let pool = pool.clone();
        async move {
            let mut conn = pool.acquire().await?;
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS written (n int); INSERT INTO written VALUES (1)",
            )
            .execute(&mut *conn)
            .await?;
            Ok::<u16, sqlx::Error>(port(&mut conn).await)
        }
    };
    assert_eq!(on(&pool).await.unwrap(), rig.primary_port);

    rig.kill_primary();
    // No host takes writes until the promotion: every try fails, none is answered wrongly.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(on(&pool).await.is_err());
    rig.promote();
    let promoted = Instant::now();
    loop {
        match on(&pool).await {
            Ok(port) => {
                assert_eq!(port, rig.standby_port);
                break;
            }
            Err(error) => assert!(
                promoted.elapsed() < Duration::from_secs(10),
                "the pool never reached the promoted standby: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "the pool wrote on the promoted standby {:?} after the promotion",
        promoted.elapsed()
    );
    pool.close().await;
}
