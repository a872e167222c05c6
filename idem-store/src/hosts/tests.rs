use super::*;

fn parse(url: &str) -> Result<HostList, sqlx::Error> {
    HostList::parse(url, PgConnectOptions::from_str)
}

#[test]
fn hosts_in_order_with_their_ports() {
    let list =
        parse("postgresql://u:p%40ss@a:5433,b,[::1]:6000,[fe80::1]/db?sslmode=disable").unwrap();
    let hosts: Vec<_> = list.hosts().collect();
    assert_eq!(hosts, ["a:5433", "b:5432", "[::1]:6000", "[fe80::1]:5432"]);
    assert_eq!(list.target_session_attrs(), TargetSessionAttrs::Any);
    assert_eq!(list.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
    let second = &list.hosts[1].options;
    assert_eq!(second.get_host(), "b");
    assert_eq!(second.get_port(), 5432);
    assert_eq!(second.get_database(), Some("db"));
    assert_eq!(second.get_username(), "u");
}

#[test]
fn its_parameters_are_read_and_not_passed_on() {
    let list = parse(
        "postgres://a,b/db?connect_timeout=1&target_session_attrs=prefer-standby\
         &application_name=shop",
    )
    .unwrap();
    assert_eq!(
        list.target_session_attrs(),
        TargetSessionAttrs::PreferStandby
    );
    // libpq: below 2 seconds counts as 2.
    assert_eq!(list.connect_timeout(), Duration::from_secs(2));
    assert_eq!(list.hosts[0].options.get_application_name(), Some("shop"));
    let seen = std::cell::RefCell::new(Vec::new());
    HostList::parse("postgres://a/db?target_session_attrs=primary&x=1", |url| {
        seen.borrow_mut().push(url.to_owned());
        PgConnectOptions::from_str(url)
    })
    .unwrap();
    assert_eq!(seen.into_inner(), ["postgres://a:5432/db?x=1"]);
    assert_eq!(
        parse("postgres://a/db?connect_timeout=0")
            .unwrap()
            .connect_timeout(),
        DEFAULT_CONNECT_TIMEOUT
    );
}

#[test]
fn every_libpq_value_of_target_session_attrs() {
    for attrs in [
        TargetSessionAttrs::Any,
        TargetSessionAttrs::ReadWrite,
        TargetSessionAttrs::ReadOnly,
        TargetSessionAttrs::Primary,
        TargetSessionAttrs::Standby,
        TargetSessionAttrs::PreferStandby,
    ] {
        assert_eq!(attrs.as_str().parse::<TargetSessionAttrs>().unwrap(), attrs);
    }
    let primary = Role {
        standby: false,
        read_only: false,
    };
    let standby = Role {
        standby: true,
        read_only: true,
    };
    let read_only_primary = Role {
        standby: false,
        read_only: true,
    };
    let accepted = |attrs: TargetSessionAttrs, strict| {
        [primary, standby, read_only_primary].map(|role| attrs.accepts(role, strict))
    };
    assert_eq!(accepted(TargetSessionAttrs::Any, true), [true, true, true]);
    assert_eq!(
        accepted(TargetSessionAttrs::ReadWrite, true),
        [true, false, false]
    );
    assert_eq!(
        accepted(TargetSessionAttrs::ReadOnly, true),
        [false, true, true]
    );
    assert_eq!(
        accepted(TargetSessionAttrs::Primary, true),
        [true, false, true]
    );
    assert_eq!(
        accepted(TargetSessionAttrs::Standby, true),
        [false, true, false]
    );
    assert_eq!(
        accepted(TargetSessionAttrs::PreferStandby, true),
        [false, true, false]
    );
    assert_eq!(
        accepted(TargetSessionAttrs::PreferStandby, false),
        [true, true, true]
    );
}

#[test]
fn what_it_refuses() {
    for (url, says) in [
        ("mysql://a,b/db", "postgres://"),
        ("postgres://a,,b/db", "empty host"),
        ("postgres://a:54x2,b/db", "invalid port `54x2`"),
        ("postgres://[::1/db", "closing"),
        (
            "postgres://a,b/db?target_session_attrs=leader",
            "invalid target_session_attrs",
        ),
        (
            "postgres://a,b/db?connect_timeout=soon",
            "invalid connect_timeout",
        ),
    ] {
        let error = parse(url).unwrap_err().to_string();
        assert!(error.contains(says), "{url}: {error}");
    }
}

#[test]
fn what_is_a_host_list() {
    assert!(HostList::is_host_list("postgres://a,b/db"));
    assert!(HostList::is_host_list("postgres://a/db?connect_timeout=3"));
    assert!(HostList::is_host_list(
        "postgresql://u@a/db?target_session_attrs=any"
    ));
    assert!(!HostList::is_host_list(
        "postgres://u:p@a:5432/db?sslmode=require"
    ));
    assert!(!HostList::is_host_list(
        "postgres:///db?host=/var/run/postgresql"
    ));
    assert!(!HostList::is_host_list("sqlite://a,b.db"));
}
