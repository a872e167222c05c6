DELETE FROM idempotency_locks
WHERE taken_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)
ORDER BY taken_at LIMIT ?
