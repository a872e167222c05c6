//! The outbox on PostgreSQL: `timestamptz` columns, crossing the wire as milliseconds; claims
//! pick their rows with `FOR UPDATE SKIP LOCKED`.

use sqlx::Postgres;

mod sql {
    /// A `timestamptz` column in milliseconds since the epoch.
    macro_rules! ms {
        ($column:literal) => {
            concat!("(extract(epoch FROM ", $column, ") * 1000)::int8")
        };
    }

    /// A `timestamptz` from a parameter in milliseconds since the epoch.
    macro_rules! ts {
        ($param:literal) => {
            concat!("to_timestamp(", $param, "::float8 / 1000)")
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
         VALUES ($1, $2, $3, 'pending', 0, ",
        ts!("$4"),
        ", ",
        ts!("$4"),
        ") ON CONFLICT (dedup_id) DO NOTHING"
    );

    /// Due, unleased pending rows in `id` order, skipping those another claim is taking
    /// right now; leased until `$2`. `locked_until` is checked again on the row version the
    /// lock was taken on (read committed), so a claim that committed meanwhile is respected.
    pub(super) const CLAIM: &str = concat!(
        "UPDATE idempotency_outbox SET locked_until = ",
        ts!("$2"),
        " WHERE id = ANY(ARRAY(SELECT id FROM idempotency_outbox \
         WHERE status = 'pending' AND next_attempt_at <= ",
        ts!("$1"),
        " AND (locked_until IS NULL OR locked_until <= ",
        ts!("$1"),
        ") ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED)) RETURNING ",
        columns!()
    );

    pub(super) const MARK_DELIVERED: &str = concat!(
        "UPDATE idempotency_outbox SET status = 'delivered', delivered_at = ",
        ts!("$2"),
        ", locked_until = NULL WHERE id = $1 AND status = 'pending'"
    );

    /// `$4`: dead; then `next_attempt_at` records when (`$5`).
    pub(super) const MARK_FAILED: &str = "UPDATE idempotency_outbox \
         SET attempts = attempts + 1, last_error = $2, \
         status = CASE WHEN $4 THEN 'dead' ELSE 'pending' END, \
         next_attempt_at = to_timestamp((CASE WHEN $4 THEN $5 ELSE $3 END)::float8 / 1000), \
         locked_until = NULL WHERE id = $1 AND status = 'pending'";

    pub(super) const GET: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_outbox WHERE dedup_id = $1"
    );

    pub(super) const LIST: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_outbox WHERE ($1::text IS NULL OR status = $1) ORDER BY id LIMIT $2"
    );

    pub(super) const COUNTS: &str = concat!(
        "SELECT status, count(*), ",
        ms!("min(created_at)"),
        " FROM idempotency_outbox GROUP BY status"
    );

    pub(super) const RETRY_DEAD: &str = concat!(
        "UPDATE idempotency_outbox SET status = 'pending', attempts = 0, next_attempt_at = ",
        ts!("$2"),
        ", locked_until = NULL WHERE dedup_id = $1 AND status = 'dead'"
    );

    /// Small batches, skipping rows another transaction holds.
    pub(super) const SWEEP_DELIVERED: &str = concat!(
        "DELETE FROM idempotency_outbox WHERE id = ANY(ARRAY(\
         SELECT id FROM idempotency_outbox WHERE status = 'delivered' AND delivered_at <= ",
        ts!("$1"),
        " LIMIT $2 FOR UPDATE SKIP LOCKED))"
    );
}

super::message::impl_outbox_sql!(Postgres);
