-- Schedule a webhook for a terminal transition (SPEC §8), from the completion consumer. At most
-- one delivery per transition however often the event is handled (replicas, claimed entries):
-- the delivery hash is created once, and its id is the webhook-id receivers deduplicate on.
-- KEYS[1] job record, KEYS[2] deliveries due (sorted set), KEYS[3] delivery hash
-- ARGV[1] delivery id, ARGV[2] now (ms), ARGV[3] job status, ARGV[4] job record key
-- Returns 1 when scheduled, 0 when the job has no callback_url or it was scheduled already.
local url = redis.call('HGET', KEYS[1], 'callback_url')
if not url or url == '' then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('HSET', KEYS[3], 'url', url, 'job_key', ARGV[4], 'status', ARGV[3], 'created_ms', ARGV[2], 'attempts', 0)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], 'webhook_status', 'scheduled')
return 1
