-- The least a durable create can cost on MySQL / MariaDB: one order row in its own
-- transaction, the INSERT a prepared statement (as the servers send it), BEGIN and COMMIT as
-- the text statements every client sends.
function thread_init()
  con = sysbench.sql.driver():connect()
  insert = con:prepare("INSERT INTO orders (id, tenant, sku, quantity) VALUES (UUID(), 'bench', 'BENCH-1', 1)")
end

function event()
  con:query("BEGIN")
  insert:execute()
  con:query("COMMIT")
end

function thread_done()
  insert:close()
  con:disconnect()
end
