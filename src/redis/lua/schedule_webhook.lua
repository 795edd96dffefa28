-- Schedule a webhook (SPEC §8) for an opt-in event (webhook_events), from the relay when the job
-- starts or reports progress (terminal webhooks are settle.lua's, in the same way). At
-- most one delivery per delivery id however often this runs (replicas, claimed entries, a
-- retried call): the delivery hash is created once, and its id is the webhook-id receivers
-- deduplicate on.
-- KEYS[1] job record, KEYS[2] deliveries due (sorted set), KEYS[3] delivery hash
-- ARGV[1] delivery id, ARGV[2] now (ms), ARGV[3] job status, ARGV[4] job record key,
-- ARGV[5] event: 'started' or 'progress'
-- Returns 1 when scheduled, 0 when the job has no callback_url, does not want this event, or
-- the delivery was scheduled already.
local url = redis.call('HGET', KEYS[1], 'callback_url')
if not url or url == '' then return 0 end
local wanted = redis.call('HGET', KEYS[1], 'webhook_events')
if not wanted or wanted == '' then wanted = 'terminal' end
if not string.find(',' .. wanted .. ',', ',' .. ARGV[5] .. ',', 1, true) then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('HSET', KEYS[3], 'url', url, 'job_key', ARGV[4], 'status', ARGV[3], 'created_ms', ARGV[2], 'attempts', 0, 'event', ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
