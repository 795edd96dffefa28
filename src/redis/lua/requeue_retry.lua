-- Requeue a retry that is due (the gateway's due sweep): out of the retries set and back at the
-- front of pending, once; a job cancelled or ended meanwhile is only dropped from the set.
-- KEYS[1] retries (sorted set), KEYS[2] pending list, KEYS[3] job record, KEYS[4] the model's
-- paused flag, KEYS[5] its held list (the queue while paused)
-- ARGV[1] job id
-- Returns 'requeued' or 'gone'.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 'gone' end
if redis.call('HGET', KEYS[3], 'status') ~= 'pending' then return 'gone' end
redis.call('HDEL', KEYS[3], 'retry_at')
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('LPUSH', KEYS[5], ARGV[1])
else
  redis.call('LPUSH', KEYS[2], ARGV[1])
end
return 'requeued'
