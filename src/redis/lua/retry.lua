-- Retry (opt-in retries of failed jobs): the relay's last step for a retryable failure with
-- attempts left, instead of finish. Fenced like finish (no write unless our lease still holds and
-- the job is not terminal). The job leaves processing for the retries set — not pending, so the
-- scaler does not start pods for it — with status pending and the failure recorded; the due
-- sweep puts it back in pending (lua/requeue_retry.lua). No event: the webhook fires once, on
-- the final outcome.
-- KEYS[1] job record, KEYS[2] lease, KEYS[3] processing list, KEYS[4] retries (sorted set)
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] due (ms since the epoch), ARGV[4] due (RFC 3339),
-- ARGV[5] the failures so far, this one included (JSON array), ARGV[6] the job's changed channel
-- (announced on only when a live event stream watches the job)
-- Returns 'ok', 'terminal', 'lease_lost' or 'missing' (nothing is written but for 'ok').
-- A retry of this step (the first try's reply lost) finds the first try's work — the job
-- waiting with this very due time — and says 'ok': it took effect (the lease was ours until then).
local st, retry_at = unpack(redis.call('HMGET', KEYS[1], 'status', 'retry_at'))
if not st then return 'missing' end
if st == 'completed' or st == 'failed' or st == 'cancelled' then return 'terminal' end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then
  if st == 'pending' and retry_at == ARGV[4] then return 'ok' end
  return 'lease_lost'
end
redis.call('HSET', KEYS[1], 'status', 'pending', 'retry_at', ARGV[4], 'failures', ARGV[5])
redis.call('HDEL', KEYS[1], 'started_at', 'holder')
redis.call('LREM', KEYS[3], 1, ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'watched') == 1 then redis.call('PUBLISH', ARGV[6], 'pending') end
return 'ok'
