SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($1) ELSE false END
FROM (SELECT pg_advisory_unlock_all()) AS released
