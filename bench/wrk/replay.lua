-- POST /orders with the same 100 keys again and again (replays; bench/run creates them first).
package.path = package.path .. ";" .. debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua"
local common = require("common")

function init(args)
  counter = 0
end

function request()
  counter = counter + 1
  local headers = {}
  for k, v in pairs(common.headers) do headers[k] = v end
  headers["Idempotency-Key"] = string.format('"replay-%d"', counter % 100)
  return wrk.format("POST", "/orders", headers, common.body)
end

done = common.done
