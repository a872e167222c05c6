SELECT idem_lock_key($1, $2, $3, $4, to_timestamp(($5)::float8 / 1000))
