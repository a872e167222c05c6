-- POST /orders with a new Idempotency-Key per request (first executions).
package.path = package.path .. ";" .. debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua"
local common = require("common")
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

function init(args)
  run = args[1] or tostring(os.time())
  counter = 0
end

function request()
  counter = counter + 1
  local headers = {}
  for k, v in pairs(common.headers) do headers[k] = v end
  headers["Idempotency-Key"] = string.format('"%s-%d-%d"', run, thread_id, counter)
  return wrk.format("POST", "/orders", headers, common.body)
end

done = common.done
