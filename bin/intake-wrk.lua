-- wrk script for `manage.py loadtest_intake`: POST /api/v1/calls/ with a unique external_id per request,
-- counting 201s per thread so the command can compare them with the rows in PostgreSQL.
-- env: TRIAGE_LOADTEST_TOKEN, TRIAGE_LOADTEST_RUN (a prefix that makes external ids unique per run)
local token = os.getenv("TRIAGE_LOADTEST_TOKEN")
local run = os.getenv("TRIAGE_LOADTEST_RUN") or tostring(os.time())
local threads = {}
local counter = 0
created, other = 0, 0  -- globals: done() reads them with thread:get

local transcripts = {
  "My husband collapsed in the kitchen, he's not breathing and his lips are going blue.",
  "I fell off my bike and my wrist is swollen, I think it might be broken, it hurts a lot.",
  "There's a woman here at the bus stop, she's confused and very sweaty, says she's diabetic.",
  "My daughter has a high temperature since this morning and she's not eating much.",
}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. token
end

function request()
  counter = counter + 1
  local body = string.format(
    '{"external_id":"%s-%d-%d","received_at":"2026-01-01T00:00:00Z","transcript":"%s","caller_relation":"relative","location_address":"1 Test Road"}',
    run, tid, counter, transcripts[(counter % #transcripts) + 1])
  return wrk.format(nil, "/api/v1/calls/", nil, body)
end

function response(status, headers, body)
  if status == 201 then created = created + 1 else other = other + 1 end
end

function done(summary, latency, requests)
  local c, o = 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("created")
    o = o + t:get("other")
  end
  io.write(string.format("LOADTEST created=%d other=%d requests=%d duration_us=%d errors_connect=%d errors_read=%d errors_timeout=%d errors_status=%d\n",
    c, o, summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.timeout, summary.errors.status))
  io.write(string.format("LOADTEST p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
