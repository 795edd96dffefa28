-- Retention (SPEC §6): when a job ends, its record is set to expire after gc.job_retention, and
-- its objects are queued for deletion at the same time (the gateway's GC loop deletes them).
-- Idempotent: a second call for the same job changes nothing but the TTL.
-- KEYS[1] job record, KEYS[2] GC due (sorted set)
-- ARGV[1] retention (ms), ARGV[2] now (ms), ARGV[3] model, ARGV[4] job id
-- Returns 1, or 0 when the record is gone.
local svc = redis.call('HGET', KEYS[1], 'service_type')
if not svc then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[2]) + tonumber(ARGV[1]), ARGV[3] .. '/' .. svc .. '/' .. ARGV[4])
return 1
