//! PostgreSQL on several hosts: a primary and its standbys in one connection string, as libpq
//! reads it, for a pool that finds the primary again after a failover.
//!
//! ```text
//! postgres://app@db1:5432,db2:5432/orders?target_session_attrs=read-write&connect_timeout=2
//! ```
//!
//! sqlx connects to one host. A [`HostList`] is the hosts of such a string, in order, with:
//!
//! - `target_session_attrs`, as libpq defines it: [`TargetSessionAttrs`] — `any` (the
//!   default), `read-write`, `read-only`, `primary`, `standby`, `prefer-standby`;
//! - `connect_timeout`: how long, in seconds, one host may take to answer before the next is
//!   tried (libpq's rule: below 2 counts as 2), and how long its answer to the session query
//!   may take. Unset, 0 or less, 10 seconds — where libpq waits as long as the operating
//!   system does, a pool cannot.
//!
//! Everything else in the string (user, password, database, `sslmode`, `options`,
//! `application_name` …) is sqlx's, the same for every host. Hosts are `name[:port]` or
//! `[v6][:port]`, the port 5432 where it is missing.
//!
//! [`HostList::connect`] tries the hosts in order and keeps the first whose session matches;
//! `prefer-standby` tries for a standby first, then takes any. [`HostList::pool`] opens a
//! sqlx pool on the host it finds and keeps it there:
//!
//! - each new connection of the pool is checked (one query, none with `any`); one that no
//!   longer matches — a primary demoted — is refused and the hosts are tried again;
//! - a connection of its own, beside the pool, is asked every second whether its host still
//!   matches. When the host is gone (`kill -9`, a lost machine) or no longer matches, the
//!   hosts are tried again in order, every 200 ms until one matches, and the pool's new
//!   connections go there ([`sqlx::Pool::set_connect_options`]): after a failover they reach
//!   the promoted standby by themselves, with no restart. Connections the pool opened before
//!   the switch are closed when next acquired; those in use fail as a dead connection does.
//!   (Connections taken out of the pool with `detach`, as idem's runtime keeps its request
//!   path's, are the taker's: they end with their server session, which a failover ends —
//!   a dead primary's, or one that failover tools restart as a standby. A primary made
//!   read-only while its sessions go on keeps them until they are replaced.)
//! - The pool stays on the host it found while that host matches: with `any`, a first host
//!   that comes back does not take the connections back (libpq's new connections would go
//!   there). With `prefer-standby`, a pool on a primary (none of the hosts was a standby, or
//!   its standby was promoted) tries for a standby again every second.
//!
//! The connection beside the pool and the task that asks it live until the pool is closed
//! ([`sqlx::Pool::close`]): the task holds the pool, so a pool on a host list that is only
//! dropped keeps its connections and that task until the process ends. Close it.
//!
//! A single host with neither parameter is not a host list ([`HostList::is_host_list`]): sqlx
//! connects to it as always.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{ConnectOptions as _, Connection as _, Postgres};
use tokio::sync::Notify;

use crate::glue::{Glue as _, Wire};

/// Asks a session whether it is a standby and whether it is read-only, as one simple query
/// (behind a transaction pooler too).
const SESSION: &str = include_str!("../sql/postgres/session.sql");

/// How often the connection beside the pool asks whether its host still matches.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How often the hosts are tried again while none matches.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// `connect_timeout` when the connection string has none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The session a connection must have (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TargetSessionAttrs {
    /// Any session (`any`, the default).
    #[default]
    Any,
    /// A session that takes writes by default (`read-write`): not a standby, and
    /// `default_transaction_read_only` off.
    ReadWrite,
    /// A session that takes no writes by default (`read-only`): a standby, or a primary with
    /// `default_transaction_read_only` on.
    ReadOnly,
    /// A server that is not in recovery (`primary`).
    Primary,
    /// A server in recovery: a standby (`standby`).
    Standby,
    /// A standby if one answers, any server otherwise (`prefer-standby`).
    PreferStandby,
}

impl TargetSessionAttrs {
    /// The value as a connection string spells it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::ReadWrite => "read-write",
            Self::ReadOnly => "read-only",
            Self::Primary => "primary",
            Self::Standby => "standby",
            Self::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a session with `role` is one of these; `strict`: `prefer-standby` takes only a
    /// standby (its first round), otherwise any.
    fn accepts(self, role: Role, strict: bool) -> bool {
        match self {
            Self::Any => true,
            Self::ReadWrite => !role.read_only,
            Self::ReadOnly => role.read_only,
            Self::Primary => !role.standby,
            Self::Standby => role.standby,
            Self::PreferStandby => role.standby || !strict,
        }
    }
}

impl fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TargetSessionAttrs {
    type Err = sqlx::Error;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(match value {
            "any" => Self::Any,
            "read-write" => Self::ReadWrite,
            "read-only" => Self::ReadOnly,
            "primary" => Self::Primary,
            "standby" => Self::Standby,
            "prefer-standby" => Self::PreferStandby,
            other => {
                return Err(sqlx::Error::Configuration(
                    format!(
                        "invalid target_session_attrs `{other}`: expected any, read-write, \
                         read-only, primary, standby or prefer-standby"
                    )
                    .into(),
                ));
            }
        })
    }
}

/// What a session is: the answer to [`SESSION`].
#[derive(Debug, Clone, Copy)]
struct Role {
    standby: bool,
    read_only: bool,
}

impl Role {
    async fn of(conn: &mut PgConnection) -> Result<Self, sqlx::Error> {
        let row = Postgres::fetch_optional_on(Wire::Literal, conn, SESSION, &[])
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        Ok(Self {
            standby: Postgres::text(&row, 0)? == "true",
            read_only: Postgres::text(&row, 1)? == "on",
        })
    }

    const fn describe(self) -> &'static str {
        match (self.standby, self.read_only) {
            (true, _) => "a standby",
            (false, true) => "a read-only primary",
            (false, false) => "a primary",
        }
    }
}

/// One host of a [`HostList`]: how it is shown (`name:port`) and its connect options.
#[derive(Debug, Clone)]
struct Host {
    shown: String,
    options: PgConnectOptions,
}

/// The hosts of a PostgreSQL connection string, in order, and the session to look for on them
/// (see the [module](self)).
#[derive(Debug, Clone)]
pub struct HostList {
    hosts: Vec<Host>,
    attrs: TargetSessionAttrs,
    connect_timeout: Duration,
}

impl HostList {
    /// Whether `url` is more than sqlx reads: several hosts, `target_session_attrs` or
    /// `connect_timeout`.
    ///
    /// ```
    /// use idem_store::hosts::HostList;
    ///
    /// assert!(HostList::is_host_list("postgres://db1,db2/app"));
    /// assert!(HostList::is_host_list("postgres://db1/app?target_session_attrs=primary"));
    /// assert!(!HostList::is_host_list("postgres://db1:5432/app?sslmode=require"));
    /// ```
    #[must_use]
    pub fn is_host_list(url: &str) -> bool {
        let Ok(parts) = Parts::of(url) else {
            // A string this cannot read: sqlx says what is wrong with it.
            return false;
        };
        parts.hosts.len() > 1
            || parts
                .query
                .iter()
                .any(|(name, _)| OURS.contains(&name.as_str()))
    }

    /// The hosts of `url`, each with the connect options `options` makes of `url` narrowed to
    /// it (sqlx's parsing, and whatever the caller adds).
    ///
    /// ```
    /// use std::str::FromStr;
    /// use idem_store::hosts::{HostList, TargetSessionAttrs};
    /// use idem_store::sqlx::postgres::PgConnectOptions;
    ///
    /// let list = HostList::parse(
    ///     "postgres://app@db1:5433,[::1]/orders?target_session_attrs=read-write&sslmode=disable",
    ///     PgConnectOptions::from_str,
    /// )?;
    /// assert_eq!(list.hosts().collect::<Vec<_>>(), ["db1:5433", "[::1]:5432"]);
    /// assert_eq!(list.target_session_attrs(), TargetSessionAttrs::ReadWrite);
    /// # Ok::<(), idem_store::sqlx::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`sqlx::Error::Configuration`] for a string that is not a `postgres://` or
    /// `postgresql://` URL, an unknown `target_session_attrs`, a `connect_timeout` that is
    /// not a number of seconds, or an empty host; whatever `options` returns.
    pub fn parse(
        url: &str,
        mut options: impl FnMut(&str) -> Result<PgConnectOptions, sqlx::Error>,
    ) -> Result<Self, sqlx::Error> {
        let parts = Parts::of(url)?;
        let mut attrs = TargetSessionAttrs::Any;
        let mut connect_timeout = DEFAULT_CONNECT_TIMEOUT;
        let mut query = Vec::new();
        for (name, value) in &parts.query {
            match name.as_str() {
                "target_session_attrs" => attrs = value.parse()?,
                "connect_timeout" => {
                    let seconds: i64 = value.trim().parse().map_err(|_| {
                        config(format!(
                            "invalid connect_timeout `{value}`: expected a number of seconds"
                        ))
                    })?;
                    // libpq: zero or less waits forever; 1 counts as 2.
                    if seconds > 0 {
                        connect_timeout = Duration::from_secs(seconds.max(2).unsigned_abs());
                    }
                }
                _ => query.push(format!("{name}={value}")),
            }
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        let hosts = parts
            .hosts
            .iter()
            .map(|host| {
                let shown = host.shown();
                let url = format!(
                    "{}://{}{shown}{}{query}",
                    parts.scheme, parts.userinfo, parts.path
                );
                Ok(Host {
                    options: options(&url)?,
                    shown,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        Ok(Self {
            hosts,
            attrs,
            connect_timeout,
        })
    }

    /// The hosts, as `name:port`, in order.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|host| host.shown.as_str())
    }

    /// The session looked for.
    #[must_use]
    pub fn target_session_attrs(&self) -> TargetSessionAttrs {
        self.attrs
    }

    /// How long one host may take to answer.
    #[must_use]
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A connection to the first host, in order, whose session matches, and that host's
    /// index; `prefer-standby` tries for a standby on every host first.
    ///
    /// # Errors
    /// When no host matches: [`sqlx::Error::Io`], saying for each host why (refused, timed
    /// out after `connect_timeout`, a standby where a primary is wanted …).
    pub async fn connect(&self) -> Result<(usize, PgConnection), sqlx::Error> {
        self.connect_where(true)
            .await
            .map(|found| (found.index, found.conn))
    }

    async fn connect_where(&self, strict: bool) -> Result<Found, sqlx::Error> {
        let mut why = Vec::with_capacity(self.hosts.len());
        let mut fallback = None;
        for (index, host) in self.hosts.iter().enumerate() {
            let mut conn = match self.open(host).await {
                Ok(conn) => conn,
                Err(error) => {
                    why.push(format!("{}: {}", host.shown, reason(&error)));
                    continue;
                }
            };
            let role = if self.attrs == TargetSessionAttrs::Any {
                None
            } else {
                match tokio::time::timeout(self.connect_timeout, Role::of(&mut conn)).await {
                    Ok(Ok(role)) => Some(role),
                    Ok(Err(error)) => {
                        why.push(format!("{}: {}", host.shown, reason(&error)));
                        continue;
                    }
                    Err(_) => {
                        why.push(format!("{}: no answer to the session query", host.shown));
                        continue;
                    }
                }
            };
            match role {
                Some(role) if !self.attrs.accepts(role, strict) => {
                    why.push(format!("{}: {}", host.shown, role.describe()));
                    if self.attrs == TargetSessionAttrs::PreferStandby && fallback.is_none() {
                        fallback = Some(Found {
                            index,
                            conn,
                            fallback: true,
                        });
                    } else {
                        let _ = conn.close().await;
                    }
                }
                _ => {
                    if let Some(other) = fallback {
                        let _ = other.conn.close().await;
                    }
                    return Ok(Found {
                        index,
                        conn,
                        fallback: false,
                    });
                }
            }
        }
        if let Some(found) = fallback {
            return Ok(found);
        }
        Err(sqlx::Error::Io(std::io::Error::other(format!(
            "no host is {}: {}",
            self.wanted(),
            why.join("; ")
        ))))
    }

    /// A connection to `host` within `connect_timeout`.
    async fn open(&self, host: &Host) -> Result<PgConnection, sqlx::Error> {
        match tokio::time::timeout(self.connect_timeout, host.options.connect()).await {
            Ok(result) => result,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer within connect_timeout ({} s)",
                    self.connect_timeout.as_secs()
                ),
            ))),
        }
    }

    fn wanted(&self) -> String {
        match self.attrs {
            TargetSessionAttrs::Any => "reachable".to_owned(),
            attrs => format!("target_session_attrs={attrs}"),
        }
    }

    /// A pool with `options` on the first host that matches, kept on a host that matches (see
    /// the [module](self)). `options`' own `after_connect` and `before_acquire` hooks are
    /// replaced: set what they do through the connect options instead.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), idem_store::sqlx::Error> {
    /// use std::str::FromStr;
    /// use idem_store::hosts::HostList;
    /// use idem_store::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    ///
    /// let url = "postgres://app@db1,db2/orders?target_session_attrs=read-write";
    /// let pool = HostList::parse(url, PgConnectOptions::from_str)?
    ///     .pool(PgPoolOptions::new().max_connections(8))
    ///     .await?;
    /// // … and when done:
    /// pool.close().await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Self::connect`], when no host matches now.
    pub async fn pool(self, options: PoolOptions<Postgres>) -> Result<PgPool, sqlx::Error> {
        let found = self.connect_where(true).await?;
        let first = self.hosts[found.index].options.clone();
        let shared = Arc::new(Shared {
            list: self,
            current: AtomicUsize::new(found.index),
            switched_at: AtomicU64::new(0),
            started: Instant::now(),
            suspect: Notify::new(),
            fallback: AtomicBool::new(found.fallback),
        });
        let checked = Arc::clone(&shared);
        let fresh = Arc::clone(&shared);
        let pool = options
            .after_connect(move |conn, _| {
                let shared = Arc::clone(&checked);
                Box::pin(async move { shared.check(conn).await })
            })
            .before_acquire(move |conn, meta| {
                let fresh = fresh.opened_since_switch(meta.age);
                Box::pin(async move {
                    if !fresh {
                        // Opened on the host the pool left: closed.
                        return Ok(false);
                    }
                    if meta.idle_for >= crate::IDLE_PING_AFTER {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(first);
        tokio::spawn(watch(pool.clone(), shared, found.conn));
        Ok(pool)
    }
}

/// [`HostList::connect_where`]'s answer.
struct Found {
    index: usize,
    conn: PgConnection,
    /// `prefer-standby` found no standby and took another server.
    fallback: bool,
}

/// What a pool on a host list and the task keeping it share.
struct Shared {
    list: HostList,
    /// The host the pool's connect options are on.
    current: AtomicUsize,
    /// When the pool last moved to another host, in milliseconds since `started`; 0 never.
    switched_at: AtomicU64,
    started: Instant,
    /// Wakes the task: a new connection did not match.
    suspect: Notify,
    /// `prefer-standby` is on a server that is not a standby.
    fallback: AtomicBool,
}

impl Shared {
    /// `after_connect`: whether a new connection is on a session that matches; if not, the
    /// task tries the hosts again and the pool's next try goes where it points then.
    async fn check(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.list.attrs == TargetSessionAttrs::Any {
            return Ok(());
        }
        let role = Role::of(conn).await?;
        if self.list.attrs.accepts(role, false) {
            return Ok(());
        }
        self.suspect.notify_one();
        Err(sqlx::Error::Io(std::io::Error::other(format!(
            "{} is {}, not {}",
            self.list.hosts[self.current.load(Ordering::Relaxed)].shown,
            role.describe(),
            self.list.wanted()
        ))))
    }

    /// Whether a connection `age` old was opened after the pool last moved.
    fn opened_since_switch(&self, age: Duration) -> bool {
        let switched = self.switched_at.load(Ordering::Relaxed);
        switched == 0 || {
            let since = self
                .started
                .elapsed()
                .saturating_sub(Duration::from_millis(switched));
            age <= since
        }
    }

    /// Points `pool`'s new connections at `found`'s host.
    fn switch(&self, pool: &PgPool, found: &Found) {
        self.fallback.store(found.fallback, Ordering::Relaxed);
        let before = self.current.swap(found.index, Ordering::Relaxed);
        if before == found.index {
            return;
        }
        pool.set_connect_options(self.list.hosts[found.index].options.clone());
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.switched_at.store(now.max(1), Ordering::Relaxed);
        tracing::warn!(
            from = %self.list.hosts[before].shown,
            to = %self.list.hosts[found.index].shown,
            target_session_attrs = %self.list.attrs,
            "the pool's new connections go to another host"
        );
    }
}

/// Until `pool` closes: asks `sentinel`'s host every [`CHECK_EVERY`] (sooner when a new
/// connection did not match) whether it still matches, and when not, tries the hosts again
/// every [`RETRY_EVERY`] until one does, and moves the pool there.
async fn watch(pool: PgPool, shared: Arc<Shared>, sentinel: PgConnection) {
    let mut closed = pool.close_event();
    let mut sentinel = Some(sentinel);
    loop {
        let pause = if sentinel.is_some() {
            CHECK_EVERY
        } else {
            RETRY_EVERY
        };
        let wait = tokio::time::timeout(pause, shared.suspect.notified());
        if closed.do_until(wait).await.is_err() {
            break;
        }
        if let Some(conn) = &mut sentinel {
            let list = &shared.list;
            let asked = tokio::time::timeout(list.connect_timeout, Role::of(conn)).await;
            let matches = matches!(asked, Ok(Ok(role)) if list.attrs.accepts(role, false));
            if let Ok(Ok(role)) = asked
                && list.attrs == TargetSessionAttrs::PreferStandby
                && !role.standby
            {
                // The standby it was on was promoted: look for a standby again.
                shared.fallback.store(true, Ordering::Relaxed);
            }
            if matches && !shared.fallback.load(Ordering::Relaxed) {
                continue;
            }
            if !matches && let Some(conn) = sentinel.take() {
                let _ = conn.close_hard().await;
            }
        }
        match closed.do_until(shared.list.connect_where(true)).await {
            Err(_) => break,
            Ok(Ok(found)) => {
                shared.switch(&pool, &found);
                if let Some(old) = sentinel.replace(found.conn) {
                    let _ = old.close().await;
                }
            }
            Ok(Err(error)) => {
                if sentinel.is_none() {
                    tracing::warn!(%error, "no host matches; trying again");
                }
            }
        }
    }
    if let Some(conn) = sentinel {
        let _ = conn.close().await;
    }
}

/// The parameters a host list reads; the others are sqlx's.
const OURS: [&str; 2] = ["target_session_attrs", "connect_timeout"];

/// A connection string cut where a host list differs from sqlx's.
struct Parts<'a> {
    scheme: &'a str,
    /// `user:password@`, or empty.
    userinfo: &'a str,
    hosts: Vec<HostPort<'a>>,
    /// `/database`, or empty.
    path: &'a str,
    /// The query's parameters, as written (still percent-encoded).
    query: Vec<(String, String)>,
}

struct HostPort<'a> {
    name: &'a str,
    port: Option<&'a str>,
}

impl HostPort<'_> {
    fn shown(&self) -> String {
        format!("{}:{}", self.name, self.port.unwrap_or("5432"))
    }
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Result<Self, sqlx::Error> {
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(scheme, _)| matches!(*scheme, "postgres" | "postgresql"))
            .ok_or_else(|| config("expected a postgres:// or postgresql:// URL".to_owned()))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (userinfo, hostlist) = authority
            .rfind('@')
            .map_or(("", authority), |at| authority.split_at(at + 1));
        let hosts = hostlist
            .split(',')
            .map(HostPort::of)
            .collect::<Result<Vec<_>, _>>()?;
        let query = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                (name.to_owned(), value.to_owned())
            })
            .collect();
        Ok(Self {
            scheme,
            userinfo,
            hosts,
            path,
            query,
        })
    }
}

impl<'a> HostPort<'a> {
    fn of(text: &'a str) -> Result<Self, sqlx::Error> {
        let (name, port) = if let Some(v6) = text.strip_prefix('[') {
            let (address, after) = v6
                .split_once(']')
                .ok_or_else(|| config(format!("invalid host `{text}`: no closing `]`")))?;
            let port = match after.strip_prefix(':') {
                Some(port) => Some(port),
                None if after.is_empty() => None,
                None => return Err(config(format!("invalid host `{text}`"))),
            };
            (&text[..address.len() + 2], port)
        } else {
            match text.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (text, None),
            }
        };
        if name.is_empty() || name == "[]" {
            return Err(config(
                "an empty host in the host list: write every host".to_owned(),
            ));
        }
        if let Some(port) = port
            && port.parse::<u16>().is_err()
        {
            return Err(config(format!("invalid port `{port}` of host `{name}`")));
        }
        Ok(Self { name, port })
    }
}

/// `error` without sqlx's "error communicating with database" before an I/O error.
fn reason(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Io(error) => error.to_string(),
        other => other.to_string(),
    }
}

fn config(message: String) -> sqlx::Error {
    sqlx::Error::Configuration(message.into())
}

#[cfg(test)]
mod tests;
