-- Admit a submission under its tenant's quotas (checked before anything is stored; atomic across
-- gateway replicas). Both limits are checked before either is charged: a refusal costs nothing.
-- max_pending: the tenant's jobs not yet terminal, as a sorted set of "<model>/<id>" by the
-- time they were admitted (the completion consumer removes a job when it ends; the reaper
-- sweeps entries a crashed gateway left). Submit rate: a token bucket, refilled continuously
-- at rate_per_minute up to burst, by Redis's clock.
-- KEYS[1] the tenant's bucket (hash: tokens, at), KEYS[2] the tenant's admitted jobs (zset)
-- ARGV[1] max pending (0: none), ARGV[2] submits per minute (0: none), ARGV[3] burst,
-- ARGV[4] member "<model>/<id>"
-- Returns {'ok'}, {'max_pending', count}, or {'rate', retry_after_ms}.
-- A retry (the reply of a first try lost) that finds its own job admitted took effect: 'ok'
-- again, charging nothing — else it would count itself against max_pending, be refused, and
-- leave its entry to the reaper's sweep.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_pending, rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if max_pending > 0 then
  if redis.call('ZSCORE', KEYS[2], ARGV[4]) then return {'ok'} end
  local count = redis.call('ZCARD', KEYS[2])
  if count >= max_pending then return {'max_pending', count} end
end
if rate > 0 then
  local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
  local tokens, at = tonumber(state[1]), tonumber(state[2])
  if not tokens then tokens, at = burst, now end
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 60000)
  if tokens < 1 then return {'rate', math.ceil((1 - tokens) * 60000 / rate)} end
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'at', now)
  -- Gone once it would be full again: an idle tenant costs no memory.
  redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 60000 / rate) + 1000)
end
if max_pending > 0 then redis.call('ZADD', KEYS[2], now, ARGV[4]) end
return {'ok'}
