SELECT pg_try_advisory_lock($1)
FROM (SELECT pg_advisory_unlock_all()) AS released
