//! The outbox on SQLite: UTC text timestamps `YYYY-MM-DD HH:MM:SS.SSS`, as in the key table;
//! a claim is one `UPDATE … RETURNING`, atomic under the database's single write lock.

use sqlx::sqlite::SqliteRow;
use sqlx::{Pool, Row as _, Sqlite, Transaction};

use super::{OutboxMessage, OutboxSql, RawOutboxRow};

mod sql {
    /// A timestamp column (or expression) in milliseconds since the epoch; `NULL` stays
    /// `NULL`.
    macro_rules! ms {
        ($column:literal) => {
            concat!(
                "CAST(round((julianday(",
                $column,
                ") - 2440587.5) * 86400000.0) AS INTEGER)"
            )
        };
    }

    /// A timestamp from a parameter in milliseconds since the epoch.
    macro_rules! ts {
        ($param:literal) => {
            concat!(
                "strftime('%Y-%m-%d %H:%M:%f', ",
                $param,
                " / 1000.0, 'unixepoch')"
            )
        };
    }

    /// Every column of a row, in the order `raw` reads them.
    macro_rules! columns {
        () => {
            concat!(
                "id, dedup_id, topic, payload, status, attempts, ",
                ms!("next_attempt_at"),
                ", ",
                ms!("locked_until"),
                ", last_error, ",
                ms!("created_at"),
                ", ",
                ms!("delivered_at")
            )
        };
    }

    /// Due at once; nothing if the dedup id exists.
    pub(super) const ENQUEUE: &str = concat!(
        "INSERT INTO idempotency_outbox \
         (dedup_id, topic, payload, status, attempts, next_attempt_at, created_at) \
         VALUES (?1, ?2, ?3, 'pending', 0, ",
        ts!("?4"),
        ", ",
        ts!("?4"),
        ") ON CONFLICT (dedup_id) DO NOTHING"
    );

    /// Due, unleased pending rows in `id` order, leased until `?2`. One statement: it holds
    /// the write lock from its start, so two claims never interleave.
    pub(super) const CLAIM: &str = concat!(
        "UPDATE idempotency_outbox SET locked_until = ",
        ts!("?2"),
        " WHERE id IN (SELECT id FROM idempotency_outbox \
         WHERE status = 'pending' AND next_attempt_at <= ",
        ts!("?1"),
        " AND (locked_until IS NULL OR locked_until <= ",
        ts!("?1"),
        ") ORDER BY id LIMIT ?3) RETURNING ",
        columns!()
    );

    pub(super) const MARK_DELIVERED: &str = concat!(
        "UPDATE idempotency_outbox SET status = 'delivered', delivered_at = ",
        ts!("?2"),
        ", locked_until = NULL WHERE id = ?1 AND status = 'pending'"
    );

    /// `?4`: dead; then `next_attempt_at` records when (`?5`).
    pub(super) const MARK_FAILED: &str = "UPDATE idempotency_outbox \
         SET attempts = attempts + 1, last_error = ?2, \
         status = CASE WHEN ?4 THEN 'dead' ELSE 'pending' END, \
         next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', \
         (CASE WHEN ?4 THEN ?5 ELSE ?3 END) / 1000.0, 'unixepoch'), \
         locked_until = NULL WHERE id = ?1 AND status = 'pending'";

    pub(super) const GET: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_outbox WHERE dedup_id = ?1"
    );

    pub(super) const LIST: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_outbox WHERE (?1 IS NULL OR status = ?1) ORDER BY id LIMIT ?2"
    );

    pub(super) const COUNTS: &str = concat!(
        "SELECT status, count(*), ",
        ms!("min(created_at)"),
        " FROM idempotency_outbox GROUP BY status"
    );

    pub(super) const RETRY_DEAD: &str = concat!(
        "UPDATE idempotency_outbox SET status = 'pending', attempts = 0, next_attempt_at = ",
        ts!("?2"),
        ", locked_until = NULL WHERE dedup_id = ?1 AND status = 'dead'"
    );

    pub(super) const SWEEP_DELIVERED: &str = concat!(
        "DELETE FROM idempotency_outbox WHERE id IN (\
         SELECT id FROM idempotency_outbox WHERE status = 'delivered' AND delivered_at <= ",
        ts!("?1"),
        " LIMIT ?2)"
    );
}

/// A row's columns, in the order of `sql::columns!`.
fn raw(row: &SqliteRow) -> Result<RawOutboxRow, sqlx::Error> {
    Ok(RawOutboxRow {
        id: row.try_get(0)?,
        dedup_id: row.try_get(1)?,
        topic: row.try_get(2)?,
        payload: row.try_get(3)?,
        status: row.try_get(4)?,
        attempts: row.try_get(5)?,
        next_attempt_at_ms: row.try_get(6)?,
        locked_until_ms: row.try_get(7)?,
        last_error: row.try_get(8)?,
        created_at_ms: row.try_get(9)?,
        delivered_at_ms: row.try_get(10)?,
    })
}

impl OutboxSql for Sqlite {
    async fn outbox_enqueue(
        tx: &mut Transaction<'_, Self>,
        message: &OutboxMessage,
        payload: &str,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(sql::ENQUEUE)
            .bind(message.dedup_id.as_str())
            .bind(message.topic.as_str())
            .bind(payload)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_claim(
        pool: &Pool<Self>,
        now_ms: i64,
        until_ms: i64,
        batch: i64,
    ) -> Result<Vec<RawOutboxRow>, sqlx::Error> {
        let rows = sqlx::query(sql::CLAIM)
            .bind(now_ms)
            .bind(until_ms)
            .bind(batch)
            .fetch_all(pool)
            .await?;
        rows.iter().map(raw).collect()
    }

    async fn outbox_mark_delivered(
        pool: &Pool<Self>,
        id: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(sql::MARK_DELIVERED)
            .bind(id)
            .bind(now_ms)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_mark_failed(
        pool: &Pool<Self>,
        id: i64,
        now_ms: i64,
        error: &str,
        next_attempt_at_ms: i64,
        dead: bool,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(sql::MARK_FAILED)
            .bind(id)
            .bind(error)
            .bind(next_attempt_at_ms)
            .bind(dead)
            .bind(now_ms)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_get(
        pool: &Pool<Self>,
        dedup_id: &str,
    ) -> Result<Option<RawOutboxRow>, sqlx::Error> {
        let row = sqlx::query(sql::GET)
            .bind(dedup_id)
            .fetch_optional(pool)
            .await?;
        row.as_ref().map(raw).transpose()
    }

    async fn outbox_list(
        pool: &Pool<Self>,
        status: Option<&'static str>,
        limit: i64,
    ) -> Result<Vec<RawOutboxRow>, sqlx::Error> {
        let rows = sqlx::query(sql::LIST)
            .bind(status)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        rows.iter().map(raw).collect()
    }

    async fn outbox_counts(
        pool: &Pool<Self>,
    ) -> Result<Vec<(String, i64, Option<i64>)>, sqlx::Error> {
        sqlx::query_as(sql::COUNTS).fetch_all(pool).await
    }

    async fn outbox_retry_dead(
        pool: &Pool<Self>,
        dedup_id: &str,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(sql::RETRY_DEAD)
            .bind(dedup_id)
            .bind(now_ms)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn outbox_sweep_delivered(
        pool: &Pool<Self>,
        before_ms: i64,
        batch: i64,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(sql::SWEEP_DELIVERED)
            .bind(before_ms)
            .bind(batch)
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }
}
