-- Expire (queue deadlines): a job whose ttl passed before any relay took it never runs. If it is
-- still pending it leaves the pending list (so the scaler does not start pods for it) and fails
-- with error_code expired, with its terminal event (its webhook fires); the caller publishes
-- the completion (redis/completion.hpp). A job already taken or ended is only dropped from the
-- expiries: a relay that took it checks the deadline itself before contacting the model; so is
-- a job waiting for its retry (it started within its ttl).
-- A queue is looked at only within `near` entries of either end, as cancel.lua does and for the
-- same reason: a job with a short ttl behind a long backlog made each expiry walk the backlog.
-- A job in neither end, not waiting for its retry and not taken lies deep in a long queue: it
-- expires where it lies, its id added to the model's dropped set for a take to drop.
-- KEYS[1] expiries (sorted set), KEYS[2] pending list, KEYS[3] job record, KEYS[4] events stream,
-- KEYS[5] the model's held list (a paused model's queue), KEYS[6] retries (sorted set),
-- KEYS[7] processing list, KEYS[8] the model's dropped set
-- ARGV[1] job id, ARGV[2] now (RFC 3339), ARGV[3] events stream max length
-- Returns {'expired', <service type>} or {'gone'}.
--#include unqueue
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[3], 'status') ~= 'pending' then return {'gone'} end
if not unqueue(2) and not unqueue(5) then
  if redis.call('ZSCORE', KEYS[6], ARGV[1]) or redis.call('LPOS', KEYS[7], ARGV[1]) then
    return {'gone'}
  end
  redis.call('SADD', KEYS[8], ARGV[1])
end
redis.call('HSET', KEYS[3], 'status', 'failed', 'error_code', 'expired', 'error_message',
           'not started within its ttl', 'finished_at', ARGV[2])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'job_id', ARGV[1], 'status', 'failed')
return {'expired', redis.call('HGET', KEYS[3], 'service_type') or ''}
