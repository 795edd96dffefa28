-- Record one webhook attempt (SPEC §8) on the delivery and, for the terminal webhook, on the
-- job; and either finish the delivery (delivered, or given up) or schedule the next attempt. A
-- finished delivery of an opt-in event (started, progress) is deleted: only the terminal one is
-- kept with the job (it is what makes its scheduling happen once).
-- KEYS[1] deliveries due (sorted set), KEYS[2] delivery hash, KEYS[3] job record
-- ARGV[1] delivery id, ARGV[2] 'delivered' | 'retrying' | 'failed' | 'refused' | 'superseded',
-- ARGV[3] next attempt (ms, for retrying), ARGV[4] attempts so far, ARGV[5] last attempt (JSON)
-- Returns 1.
if ARGV[2] == 'retrying' then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
local event = redis.call('HGET', KEYS[2], 'event')
if event and event ~= 'terminal' then
  if ARGV[2] == 'retrying' then
    redis.call('HSET', KEYS[2], 'attempts', ARGV[4], 'outcome', ARGV[2], 'last', ARGV[5])
  else
    redis.call('DEL', KEYS[2])
  end
  return 1
end
redis.call('HSET', KEYS[2], 'attempts', ARGV[4], 'outcome', ARGV[2], 'last', ARGV[5])
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'webhook_status', ARGV[2], 'webhook_attempts', ARGV[4], 'webhook_last', ARGV[5])
end
return 1
