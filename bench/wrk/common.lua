-- Shared by the wrk scripts: one JSON summary line for bench/run to read.
local M = {}

function M.done(summary, latency)
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end

M.body = '{"sku": "BENCH-1", "quantity": 1}'
M.headers = { ["Authorization"] = "Bearer bench", ["Content-Type"] = "application/json" }

return M
