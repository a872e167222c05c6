-- POST /bench/plain-orders: the same handler without #[idempotent].
package.path = package.path .. ";" .. debug.getinfo(1, "S").source:match("@(.*/)") .. "?.lua"
local common = require("common")

function request()
  return wrk.format("POST", "/bench/plain-orders", common.headers, common.body)
end

done = common.done
