-- Reap (seed "Crash recovery", SPEC §4.6): one id of a processing list. An id is reaped only
-- when it has been seen without a lease on two passes at least a grace period apart (by Redis's
-- clock, so that replicas agree): a relay between its BLMOVE and its lease is never reaped.
-- Then, atomically: LREM it, count the attempt, and either put it back at the front of pending
-- (status pending), or after max attempts dead-letter it: RPUSH deadletter, status failed with
-- error_code dead_lettered, and a terminal event (so its webhook fires); the caller then
-- publishes the completion.
-- KEYS[1] processing, KEYS[2] lease, KEYS[3] job record, KEYS[4] pending, KEYS[5] deadletter,
-- KEYS[6] suspects hash, KEYS[7] events stream, KEYS[8] the model's paused flag, KEYS[9] its held
-- list (the queue while paused), KEYS[10] its dropped set (an ended job's id left in a queue:
-- see cancel.lua; one taken by a relay that died before begin.lua dropped it leaves it here)
-- ARGV[1] job id, ARGV[2] grace in ms, ARGV[3] max reap attempts, ARGV[4] now (RFC 3339),
-- ARGV[5] events stream max length, ARGV[6] the job's changed channel (announced on, when requeued,
-- only when a live event stream watches the job)
-- Returns {'alive'} (has a lease), {'gone'} (not in processing, or a stale entry dropped),
-- {'marked'} (first seen lease-less), {'waiting'} (within grace), {'requeued'}, or
-- {'deadlettered', <service type>}: the caller publishes the completion (redis/completion.hpp).
local id = ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HDEL', KEYS[6], id)
  return {'alive'}
end
if not redis.call('LPOS', KEYS[1], id) then
  redis.call('HDEL', KEYS[6], id)
  return {'gone'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = redis.call('HGET', KEYS[6], id)
if not first then
  redis.call('HSET', KEYS[6], id, string.format('%.0f', now))
  return {'marked'}
end
if now - tonumber(first) < tonumber(ARGV[2]) then return {'waiting'} end
redis.call('HDEL', KEYS[6], id)
redis.call('LREM', KEYS[1], 1, id)
local st = redis.call('HGET', KEYS[3], 'status')
if not st or st == 'completed' or st == 'failed' or st == 'cancelled' then
  redis.call('SREM', KEYS[10], id)
  return {'gone'}
end
local attempts = redis.call('HINCRBY', KEYS[3], 'attempts', 1)
if attempts >= tonumber(ARGV[3]) then
  redis.call('RPUSH', KEYS[5], id)
  redis.call('HSET', KEYS[3], 'status', 'failed', 'error_code', 'dead_lettered', 'error_message',
             'the relay processing this job stopped ' .. attempts .. ' times without finishing it',
             'finished_at', ARGV[4])
  redis.call('HDEL', KEYS[3], 'holder')
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[5], '*', 'job_id', id, 'status', 'failed')
  return {'deadlettered', redis.call('HGET', KEYS[3], 'service_type') or ''}
end
if redis.call('EXISTS', KEYS[8]) == 1 then
  redis.call('LPUSH', KEYS[9], id)
else
  redis.call('LPUSH', KEYS[4], id)
end
redis.call('HSET', KEYS[3], 'status', 'pending')
redis.call('HDEL', KEYS[3], 'started_at', 'holder')
if redis.call('HEXISTS', KEYS[3], 'watched') == 1 then redis.call('PUBLISH', ARGV[6], 'pending') end
return {'requeued'}
