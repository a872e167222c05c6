SELECT pg_is_in_recovery()::text, current_setting('transaction_read_only')
