SELECT sum(pgsize) FROM dbstat
WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'idempotency_keys')
