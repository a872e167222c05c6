BEGIN;
SET LOCAL lock_timeout = 0;
SET LOCAL statement_timeout = 0;
SELECT pg_advisory_xact_lock(7594306391241484647)
