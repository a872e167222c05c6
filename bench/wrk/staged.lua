-- POST /payments (staged mode, against the fake provider) with a new Idempotency-Key per
-- request: reservation, the provider call as a journaled step, the payment and its outbox
-- event with the response.
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
  return wrk.format("POST", "/payments", headers,
    '{"amount": 1250, "currency": "EUR", "customer": "bench"}')
end

done = common.done
