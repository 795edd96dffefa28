-- Dequeue bookkeeping, run right after BLMOVE pending -> processing (SPEC §4.2): take the lease
-- and mark the record processing. Until this runs the id sits in processing without a lease;
-- the reaper tolerates that window (it reaps only ids seen lease-less on two passes).
-- KEYS[1] job record, KEYS[2] processing list, KEYS[3] lease, KEYS[4] the model's dropped set
-- (an ended job dropped leaves it: see cancel.lua)
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] lease TTL in ms, ARGV[4] now (RFC 3339),
-- ARGV[5] the job's changed channel (announced on only when a live event stream watches it)
-- Returns {'ok'} (the record is read by a plain HGETALL sent behind this call: each field
-- returned from a script cost Redis two conversions, into Lua and out — ~7 µs of a begin's ~12
-- with a 22-field record); {'missing'} when the record is gone, or
-- {'terminal', status} when the job already ended (a cancelled job, say) — in both cases the id
-- is taken out of processing and no lease is written; {'missing'} too when the id is no longer in
-- processing (reaped meanwhile: it must not get a lease in two places).
if not redis.call('LPOS', KEYS[2], ARGV[1]) then return {'missing'} end
local st = redis.call('HGET', KEYS[1], 'status')
if not st then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[1])
  return {'missing'}
end
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[1])
  return {'terminal', st}
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'processing', 'started_at', ARGV[4], 'holder', ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'watched') == 1 then redis.call('PUBLISH', ARGV[5], 'processing') end
return {'ok'}
