SELECT pg_backend_pid()::int8
