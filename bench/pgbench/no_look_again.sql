-- For `AB_OLD_SQL` in bench/ab: turns a database migrated by today's idem back into one whose
-- key lock does not look again. `idem_lock_key` keeps its signature (the binary calls it) and
-- becomes a SQL function around the bare advisory lock, which PostgreSQL inlines: the
-- statement runs as `SELECT pg_advisory_xact_lock(…)`, what `BEGIN` sent before a duplicate
-- learnt to look at the key once it holds the lock. Against an unchanged database, the A/B
-- then measures the whole look-again (the PL/pgSQL call and its probe), one binary on both
-- sides.
CREATE OR REPLACE FUNCTION idem_lock_key(p_lock BIGINT, p_scope TEXT, p_operation TEXT, p_key TEXT,
                                         p_expired_by TIMESTAMPTZ) RETURNS void
LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(p_lock) $$;
