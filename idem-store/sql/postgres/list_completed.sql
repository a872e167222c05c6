AND status = 'completed' AND expires_at > to_timestamp(($1)::float8 / 1000)
