//! The database the tool works on: one [`KeyTable`] on PostgreSQL, SQLite or MySQL, chosen
//! by the URL, with the same methods whichever it is, and the [`Outbox`] and the [`Inbox`]
//! beside it.

use std::str::FromStr;
use std::time::Duration;

use idem_store::hosts::HostList;
use idem_store::sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use idem_store::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use idem_store::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use idem_store::sqlx::{MySql, Postgres, Sqlite};
use idem_store::{
    Acted, Action, Actor, AuditEntry, AuditFilter, Counts, Cursor, Inbox, InboxEvent, InboxStatus,
    Journal, KeyFilter, KeyRef, KeyRow, KeyTable, Keyring, OperationInfo, Outbox, OutboxCounts,
    OutboxRow, OutboxStatus, Page, Registration, Resealed, ResealedRows, StoreError,
};

/// Why the tool could not open the database.
#[derive(Debug)]
pub struct ConnectError(pub String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

/// The key table of the database the tool was pointed at.
#[derive(Debug, Clone)]
pub enum Db {
    /// `postgres://…` or `postgresql://…`.
    Postgres(KeyTable<Postgres>),
    /// `sqlite:…`.
    Sqlite(KeyTable<Sqlite>),
    /// `mysql://…` or `mariadb://…`.
    MySql(KeyTable<MySql>),
}

/// Calls the same method on whichever table `self` holds.
macro_rules! on_table {
    ($self:ident, $table:ident => $call:expr) => {
        match $self {
            Db::Postgres($table) => $call,
            Db::Sqlite($table) => $call,
            Db::MySql($table) => $call,
        }
    };
}

/// Calls the same method on a table beside the key table (`Outbox`, `Inbox`) of whichever
/// database `self` holds, with the key table's storage keys.
macro_rules! on_beside {
    ($self:ident, $area:ident, $name:ident => $call:expr) => {
        on_table!($self, t => {
            let mut $name = $area::new(t.pool().clone());
            if let Some(ring) = t.keyring() {
                $name = $name.with_keyring(ring.clone());
            }
            $call
        })
    };
}

impl Db {
    /// Opens the database at `url` (`postgres://…`, `postgresql://…`, `mysql://…`,
    /// `mariadb://…` or `sqlite:…`); on PostgreSQL, names resolve in `schema` when given, and
    /// a [host list](idem_store::hosts) (`postgres://db1,db2/app?target_session_attrs=read-write`)
    /// reaches the host it asks for. Never creates a database: a SQLite file that does not
    /// exist is an error.
    ///
    /// # Errors
    /// An unknown scheme, an unreadable URL, or a database that does not answer; the message
    /// shows the URL redacted ([`redact`]).
    pub async fn connect(url: &str, schema: Option<&str>) -> Result<Self, ConnectError> {
        let shown = redact(url);
        let failed = |e: idem_store::sqlx::Error| ConnectError(format!("{shown}: {e}"));
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // The tool's statements are few: sent as a transaction pooler (PgBouncer in
            // transaction mode) needs them, whether or not one is on the way — no prepared
            // statements, no startup parameters it would refuse.
            idem_store::pooler::behind_transaction_pooler();
            let options = |url: &str| {
                let options = PgConnectOptions::from_str(url)?.extra_float_digits(None);
                Ok(match schema {
                    Some(schema) => options.options([("search_path", schema)]),
                    None => options,
                })
            };
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(10));
            // Several hosts (a primary and its standbys): the one `target_session_attrs` asks
            // for, as libpq finds it.
            let pool = if HostList::is_host_list(url) {
                HostList::parse(url, options)
                    .map_err(failed)?
                    .pool(pool)
                    .await
            } else {
                pool.connect_with(options(url).map_err(failed)?).await
            }
            .map_err(failed)?;
            Ok(Self::Postgres(KeyTable::new(pool)))
        } else if url.starts_with("sqlite:") {
            if schema.is_some() {
                return Err(ConnectError(
                    "--schema applies to PostgreSQL only; SQLite has no schemas".into(),
                ));
            }
            let options = SqliteConnectOptions::from_str(url)
                .map_err(failed)?
                .create_if_missing(false)
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .map_err(failed)?;
            Ok(Self::Sqlite(KeyTable::new(pool)))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            if schema.is_some() {
                return Err(ConnectError(
                    "--schema applies to PostgreSQL only; on MySQL name the database in the URL"
                        .into(),
                ));
            }
            let options = MySqlConnectOptions::from_str(url).map_err(failed)?;
            let pool = MySqlPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await
                .map_err(failed)?;
            Ok(Self::MySql(KeyTable::new(pool)))
        } else {
            Err(ConnectError(format!(
                "{shown}: unknown database URL: expected postgres://…, mysql://… or sqlite:…"
            )))
        }
    }

    /// The same database, read and written with the storage keys `ring`
    /// ([`KeyTable::with_keyring`], and the outbox's and the inbox's).
    #[must_use]
    pub fn with_keyring(self, ring: Keyring) -> Self {
        match self {
            Self::Postgres(t) => Self::Postgres(t.with_keyring(ring)),
            Self::Sqlite(t) => Self::Sqlite(t.with_keyring(ring)),
            Self::MySql(t) => Self::MySql(t.with_keyring(ring)),
        }
    }

    /// The storage keys, if the tool was given them.
    #[must_use]
    pub fn keyring(&self) -> Option<&Keyring> {
        on_table!(self, t => t.keyring())
    }

    /// `postgres`, `sqlite` or `mysql`.
    #[must_use]
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
            Self::MySql(_) => "mysql",
        }
    }

    /// See [`KeyTable::get`].
    pub async fn get(&self, key: KeyRef<'_>, now_ms: i64) -> Result<Option<KeyRow>, StoreError> {
        on_table!(self, t => t.get(key, now_ms).await)
    }

    /// See [`KeyTable::list`].
    pub async fn list(&self, filter: &KeyFilter, now_ms: i64) -> Result<Page, StoreError> {
        on_table!(self, t => t.list(filter, now_ms).await)
    }

    /// See [`KeyTable::counts`].
    pub async fn counts(&self, now_ms: i64) -> Result<Counts, StoreError> {
        on_table!(self, t => t.counts(now_ms).await)
    }

    /// See [`KeyTable::act`].
    pub async fn act(
        &self,
        key: KeyRef<'_>,
        expected: &KeyRow,
        action: &Action,
        by: &Actor,
        now_ms: i64,
    ) -> Result<Acted, StoreError> {
        on_table!(self, t => t.act(key, expected, action, by, now_ms).await)
    }

    /// See [`KeyTable::audit`].
    pub async fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        on_table!(self, t => t.audit(filter).await)
    }

    /// See [`KeyTable::journal`].
    pub async fn journal(&self, key: KeyRef<'_>) -> Result<Option<Journal>, StoreError> {
        on_table!(self, t => t.journal(key).await)
    }

    /// See [`KeyTable::field_digests`].
    pub async fn field_digests(&self, key: KeyRef<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        on_table!(self, t => t.field_digests(key).await)
    }

    /// See [`KeyTable::reseal`].
    pub async fn reseal(
        &self,
        after: Option<&Cursor>,
        batch: u32,
        by: &Actor,
        now_ms: i64,
    ) -> Result<Resealed, StoreError> {
        on_table!(self, t => t.reseal(after, batch, by, now_ms).await)
    }

    /// See [`Outbox::reseal`].
    pub async fn outbox_reseal(&self, after: i64, batch: u32) -> Result<ResealedRows, StoreError> {
        on_beside!(self, Outbox, o => o.reseal(after, batch).await)
    }

    /// See [`Inbox::reseal`].
    pub async fn inbox_reseal(&self, after: i64, batch: u32) -> Result<ResealedRows, StoreError> {
        on_beside!(self, Inbox, i => i.reseal(after, batch).await)
    }

    /// See [`KeyTable::sweep_batch`].
    pub async fn sweep_batch(&self, before_ms: i64, batch: u32) -> Result<u64, StoreError> {
        on_table!(self, t => t.sweep_batch(before_ms, batch).await)
    }

    /// See [`KeyTable::count_sweepable`].
    pub async fn count_sweepable(&self, before_ms: i64) -> Result<u64, StoreError> {
        on_table!(self, t => t.count_sweepable(before_ms).await)
    }

    /// See [`KeyTable::registrations`].
    pub async fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        on_table!(self, t => t.registrations().await)
    }

    /// See [`KeyTable::operations`].
    pub async fn operations(&self, now_ms: i64) -> Result<Vec<OperationInfo>, StoreError> {
        on_table!(self, t => t.operations(now_ms).await)
    }

    /// See [`Outbox::list`].
    pub async fn outbox_list(
        &self,
        status: Option<OutboxStatus>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        on_beside!(self, Outbox, o => o.list(status, limit).await)
    }

    /// See [`Outbox::counts`].
    pub async fn outbox_counts(&self, now_ms: i64) -> Result<OutboxCounts, StoreError> {
        on_beside!(self, Outbox, o => o.counts(now_ms).await)
    }

    /// See [`Outbox::find`].
    pub async fn outbox_find(&self, id: i64) -> Result<Option<OutboxRow>, StoreError> {
        on_beside!(self, Outbox, o => o.find(id).await)
    }

    /// A message as the command line names it: by its numeric id, or, when `name` is not a
    /// number or no message has that id, by its dedup id ([`Outbox::find`],
    /// [`Outbox::get`]).
    pub async fn outbox_lookup(&self, name: &str) -> Result<Option<OutboxRow>, StoreError> {
        if let Ok(id) = name.trim().parse::<i64>()
            && let Some(row) = self.outbox_find(id).await?
        {
            return Ok(Some(row));
        }
        on_beside!(self, Outbox, o => o.get(name).await)
    }

    /// See [`Outbox::retry`].
    pub async fn outbox_retry(
        &self,
        id: i64,
        now_ms: i64,
        by: &Actor,
    ) -> Result<OutboxRow, StoreError> {
        on_beside!(self, Outbox, o => o.retry(id, now_ms, by).await)
    }

    /// See [`Outbox::retry_all`].
    pub async fn outbox_retry_all(&self, now_ms: i64, by: &Actor) -> Result<u64, StoreError> {
        on_beside!(self, Outbox, o => o.retry_all(now_ms, by).await)
    }

    /// See [`Inbox::list`].
    pub async fn inbox_list(
        &self,
        status: Option<InboxStatus>,
        limit: u32,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        on_beside!(self, Inbox, i => i.list(status, limit).await)
    }

    /// See [`Inbox::get`].
    pub async fn inbox_get(&self, event_id: &str) -> Result<Vec<InboxEvent>, StoreError> {
        on_beside!(self, Inbox, i => i.get(event_id).await)
    }
}

/// `url` without its password (`postgres://alice:***@host/db`), for every message and
/// screen: the tool never prints a password.
#[must_use]
pub fn redact(url: &str) -> String {
    // scheme://user:password@host… → scheme://user:***@host…
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The user information ends at the last `@` before the query: a password may hold a raw
    // `/` or `@`, a host or a database's path holds neither.
    let before_query = rest.split_once('?').map_or(rest, |(before, _)| before);
    let Some(at) = before_query.rfind('@') else {
        return redact_query(url);
    };
    let (userinfo, host) = (&rest[..at], &rest[at + 1..]);
    let user = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    redact_query(&format!("{scheme}://{user}@{host}"))
}

/// Hides a `password=` query parameter.
fn redact_query(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://alice:s3cret@db.internal:5432/app"),
            "postgres://alice:***@db.internal:5432/app"
        );
        assert_eq!(
            redact("postgres://alice@db/app?password=s3cret&sslmode=require"),
            "postgres://alice@db/app?password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgres://a:p@ss@host/db"),
            "postgres://a:***@host/db",
            "an @ in the password"
        );
        assert_eq!(
            redact("sqlite:///var/lib/app.db"),
            "sqlite:///var/lib/app.db"
        );
        assert_eq!(redact("sqlite:app.db"), "sqlite:app.db");
        assert_eq!(
            redact("postgres://a:pa/ss@host/db"),
            "postgres://a:***@host/db",
            "a raw / in the password"
        );
        assert_eq!(
            redact("postgres://a:x/y@z@host:5432/db?sslmode=require&password=q/r"),
            "postgres://a:***@host:5432/db?sslmode=require&password=***",
            "a / and an @ in the password, and one in the query"
        );
        assert_eq!(
            redact("postgres://host/db?password=s3cret"),
            "postgres://host/db?password=***"
        );
    }
}
