-- The least a replay can cost on MySQL / MariaDB: one row by primary key, a prepared
-- statement (run against the 100 stored keys `bench/run` creates).
function thread_init()
  con = sysbench.sql.driver():connect()
  lookup = con:prepare("SELECT fingerprint, status, response_status, response_headers, response_body, expires_at " ..
    "FROM idempotency_keys WHERE scope = 'tenant:bench' AND operation = 'create_order:v1' AND idempotency_key = ?")
  key = lookup:bind_create(sysbench.sql.type.VARCHAR, 16)
  lookup:bind_param(key)
end

function event()
  key:set("replay-" .. sysbench.rand.uniform(0, 99))
  lookup:execute()
end

function thread_done()
  lookup:close()
  con:disconnect()
end
