-- GET /orders/{id} over 100 existing orders, again and again: the example's own read by
-- primary key, no idem on its path (bench/run writes the ids, one a line, to the file
-- named by BENCH_ORDER_IDS). What a replay would cost if idem cost nothing.
package.path = package.path .. ";" .. debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua"
local common = require("common")

local paths = {}
for id in io.lines(os.getenv("BENCH_ORDER_IDS")) do
  paths[#paths + 1] = "/orders/" .. id
end
assert(#paths > 0, "no order ids in BENCH_ORDER_IDS")

function init(args)
  counter = 0
end

function request()
  counter = counter + 1
  return wrk.format("GET", paths[counter % #paths + 1], common.headers)
end

done = common.done
