//! idem's own migration history: `idem_schema_migrations`.

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::glue::{Arg, Wire};
use crate::migration::Migration;
use crate::sql::APPLIED;
use sqlx::Transaction;

/// The advisory lock PostgreSQL migrations run under, so that instances starting at once
/// apply each migration once: `pg_advisory_xact_lock(7594306391241484647)`, the ASCII bytes
/// `idem-mig` read as a big-endian `i64`, taken by each of [`migrate`]'s transactions with no
/// lock or statement timeout ([migrations](crate#migrations)). Look for it in `pg_locks`
/// (`locktype = 'advisory'`, `classid = 1768187245`, `objid = 762145127`). Fixed for good:
/// instances of different versions starting together must agree on it.
pub const MIGRATION_LOCK_ID: i64 = i64::from_be_bytes(*b"idem-mig");

/// The version under which idem 0.1 recorded its one migration in sqlx's `_sqlx_migrations`.
pub(crate) const LEGACY_SQLX_VERSION: i64 = 20_261_130_000_001;

impl Migration {
    /// [`StoreError::Migrate`] unless `recorded` is this migration's checksum.
    pub(crate) fn verify(&self, recorded: &[u8]) -> Result<(), StoreError> {
        if self.accepts(recorded) {
            return Ok(());
        }
        Err(StoreError::Migrate {
            version: self.version,
            reason: format!(
                "`{}` was applied with other SQL than this version of idem has (the checksums \
                 in idem_schema_migrations differ); the key table may not be what this version \
                 expects",
                self.description
            ),
            source: None,
        })
    }
}

/// Checks the recorded history against `migrations` and returns those still to apply;
/// versions recorded but unknown here (a newer idem's, during a rolling deploy) are left alone.
pub(crate) fn pending(
    migrations: &'static [Migration],
    recorded: &[(i64, Vec<u8>)],
) -> Result<Vec<&'static Migration>, StoreError> {
    let mut pending = Vec::new();
    for migration in migrations {
        match recorded.iter().find(|(v, _)| *v == migration.version) {
            Some((_, checksum)) => migration.verify(checksum)?,
            None => pending.push(migration),
        }
    }
    for (version, _) in recorded {
        if !migrations.iter().any(|m| m.version == *version) {
            tracing::debug!(
                version,
                "key table migration applied by a newer version of idem"
            );
        }
    }
    Ok(pending)
}

/// The connection a migration run goes through, holding the session lock where the database
/// has one (MySQL's): closed rather than pooled again unless the run let go of the lock and
/// reset the session (a run dropped halfway, say).
struct MigrationSession<DB: Database> {
    conn: PoolConnection<DB>,
    clean: bool,
}

impl<DB: Database> Drop for MigrationSession<DB> {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// [`migrate`]: [`apply`] under [`Backend::lock_migrations`]'s session lock (MySQL's).
pub(crate) async fn run_migrations<DB: Backend>(pool: &Pool<DB>) -> Result<(), StoreError> {
    let mut session = MigrationSession {
        conn: pool.acquire().await?,
        clean: false,
    };
    lock_migrations::<DB>(&mut session.conn).await?;
    let result = apply::<DB>(&mut session.conn).await;
    // Dropping a failed migration's transaction queued its `ROLLBACK`; it goes out first.
    match unlock_migrations::<DB>(&mut session.conn).await {
        Ok(()) => session.clean = true,
        Err(error) => tracing::warn!(%error, "could not release the migration lock"),
    }
    result
}

/// Applies the pending migrations, each in its own transaction with its history row. Each
/// transaction begins with [`MigrationSql::begin_migration`](crate::sql::MigrationSql::begin_migration) and
/// looks at the history again, so that another process that migrated meanwhile is seen. Every
/// statement goes as [`Wire::Literal`]: no prepared statement outlives a run (a transaction
/// pooler on the way, say).
async fn apply<DB: Backend>(conn: &mut DB::Connection) -> Result<(), StoreError> {
    // The history table, created under the lock: instances creating it at once would race.
    let mut tx = begin_migration::<DB>(conn).await?;
    DB::batch(&mut tx, DB::SQL.migrations.history).await?;
    tx.commit().await?;
    let rows = DB::fetch_all_on(Wire::Literal, conn, APPLIED, &[]).await?;
    let recorded = rows
        .iter()
        .map(|row| Ok((DB::int(row, 0)?, DB::bytes(row, 1)?)))
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    for migration in pending(DB::migrations(), &recorded)? {
        let version = migration.version;
        let mut tx = begin_migration::<DB>(conn).await?;
        let applied = DB::fetch_optional_on(
            Wire::Literal,
            &mut tx,
            DB::SQL.migrations.applied_one,
            &[Arg::Int(version)],
        )
        .await?;
        if let Some(row) = applied {
            migration.verify(&DB::bytes(&row, 0)?)?;
            continue;
        }
        DB::batch(&mut tx, migration.sql)
            .await
            .map_err(|e| StoreError::migration_failed(version, e))?;
        if version == 1 {
            forget_sqlx_history::<DB>(&mut tx)
                .await
                .map_err(|e| StoreError::migration_failed(version, e))?;
        }
        let checksum = migration.checksum();
        let record = [
            Arg::Int(version),
            Arg::Text(migration.description),
            Arg::Bytes(&checksum),
        ];
        DB::execute_on(Wire::Literal, &mut tx, DB::SQL.migrations.record, &record).await?;
        tx.commit().await?;
        tracing::info!(
            version,
            description = migration.description,
            "key table migrated"
        );
    }
    Ok(())
}

/// `Transaction::begin` with [`MigrationSql::begin_migration`](crate::sql::MigrationSql::begin_migration).
async fn begin_migration<DB: Backend>(
    conn: &mut DB::Connection,
) -> Result<Transaction<'_, DB>, sqlx::Error> {
    Transaction::begin(conn, DB::SQL.migrations.begin_migration.map(Into::into)).await
}

/// Deletes idem 0.1's row ([`LEGACY_SQLX_VERSION`]) from sqlx's history, if there is one.
async fn forget_sqlx_history<DB: Backend>(conn: &mut DB::Connection) -> Result<(), sqlx::Error> {
    let exists = DB::fetch_optional_on(
        Wire::Literal,
        conn,
        DB::SQL.migrations.has_sqlx_history,
        &[],
    )
    .await?;
    if !exists
        .map(|row| DB::flag(&row, 0))
        .transpose()?
        .unwrap_or(false)
    {
        return Ok(());
    }
    let version = [Arg::Int(LEGACY_SQLX_VERSION)];
    let forgotten = DB::execute_on(
        Wire::Literal,
        conn,
        DB::SQL.migrations.forget_sqlx_version,
        &version,
    )
    .await?;
    if forgotten > 0 {
        tracing::info!(
            version = LEGACY_SQLX_VERSION,
            "removed idem's former migration from _sqlx_migrations"
        );
    }
    Ok(())
}

/// Creates or updates the key table on `pool`: applies the migrations of
/// [`Backend::migrations`] that its history, `idem_schema_migrations (version, description,
/// checksum, applied_at)`, does not list ([migrations](crate#migrations)). Instances starting
/// at once apply each migration once; running it again is a no-op. A direct connection is
/// the usual place for schema changes, though a transaction pooler will do.
///
/// Upgrading from idem 0.1: migration 1 adopts its table, and in the same transaction
/// deletes idem 0.1's row (version `20261130000001`) from sqlx's `_sqlx_migrations`, if that
/// table exists, so that the application's sqlx migrator no longer finds a version it does
/// not know.
///
/// # Errors
/// [`StoreError::Migrate`] for a failed migration, or one recorded with other SQL than this
/// version embeds (refused before anything is applied); [`StoreError::Database`] when the
/// database fails otherwise.
pub async fn migrate<DB: Backend>(pool: &Pool<DB>) -> Result<(), StoreError> {
    run_migrations(pool).await.map_err(StoreError::refine::<DB>)
}

/// Checks that every migration of [`Backend::migrations`] is in the database, where another
/// tool applies them ([migrations](crate#migrations)): runs each one's [`Migration::present`]
/// query and applies nothing. A database [`migrate`] migrated passes as well.
///
/// # Errors
/// [`StoreError::Migrate`] naming the first migration not applied (its version, its file and
/// what it does), or [`StoreError::Database`] when the database fails otherwise.
pub async fn check_schema<DB: Backend>(pool: &Pool<DB>) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await.map_err(StoreError::from)?;
    for migration in DB::migrations() {
        let found = DB::fetch_optional_on(Wire::Literal, &mut conn, migration.present, &[]).await;
        let source = match found {
            Ok(Some(_)) => continue,
            Ok(None) => None,
            Err(error @ sqlx::Error::Database(_)) => Some(error),
            Err(error) => return Err(StoreError::from(error).refine::<DB>()),
        };
        return Err(StoreError::Migrate {
            version: migration.version,
            reason: format!(
                "migration {} ({}) is not applied: idem's tables are managed by another \
                 tool here, so idem applies nothing; apply migrations/{}, then the \
                 files after it, in order",
                migration.file, migration.description, migration.file
            ),
            source,
        });
    }
    Ok(())
}

/// Takes [`MigrationSql::lock_migrations`] on `conn`, for the session, where the database has it.
pub(crate) async fn lock_migrations<DB: Backend>(
    conn: &mut DB::Connection,
) -> Result<(), sqlx::Error> {
    execute_if::<DB>(conn, DB::SQL.migrations.lock_migrations).await
}

/// Lets go of [`Self::lock_migrations`]'s lock.
pub(crate) async fn unlock_migrations<DB: Backend>(
    conn: &mut DB::Connection,
) -> Result<(), sqlx::Error> {
    execute_if::<DB>(conn, DB::SQL.migrations.unlock_migrations).await
}

/// Runs `statement`, if there is one.
async fn execute_if<DB: Backend>(
    conn: &mut DB::Connection,
    statement: Option<&str>,
) -> Result<(), sqlx::Error> {
    match statement {
        Some(statement) => DB::execute(conn, statement, &[]).await.map(drop),
        None => Ok(()),
    }
}
