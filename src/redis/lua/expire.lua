-- Expire (queue deadlines): a job whose ttl passed before any relay took it never runs. If it is
-- still pending it leaves the pending list (so the scaler does not start pods for it) and fails
-- with error_code expired, with its terminal event (its webhook fires); the caller publishes
-- the completion (redis/completion.hpp). A job already taken or ended is only dropped from the
-- expiries: a relay that took it checks the deadline itself before contacting the model.
-- KEYS[1] expiries (sorted set), KEYS[2] pending list, KEYS[3] job record, KEYS[4] events stream,
-- KEYS[5] the model's held list (a paused model's queue)
-- ARGV[1] job id, ARGV[2] now (RFC 3339), ARGV[3] events stream max length
-- Returns {'expired', <service type>} or {'gone'}.
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[3], 'status') ~= 'pending' then return {'gone'} end
if redis.call('LREM', KEYS[2], 1, ARGV[1]) == 0 and redis.call('LREM', KEYS[5], 1, ARGV[1]) == 0 then
  return {'gone'}
end
redis.call('HSET', KEYS[3], 'status', 'failed', 'error_code', 'expired', 'error_message',
           'not started within its ttl', 'finished_at', ARGV[2])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'job_id', ARGV[1], 'status', 'failed')
return {'expired', redis.call('HGET', KEYS[3], 'service_type') or ''}
