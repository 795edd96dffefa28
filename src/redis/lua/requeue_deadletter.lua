-- Requeue a dead-lettered job (operators: relayctl deadletter requeue): out of the dead-letter
-- list, back at the end of pending with status pending and its crash count and error cleared.
-- KEYS[1] dead-letter list, KEYS[2] pending list, KEYS[3] job record, KEYS[4] the model's paused
-- flag, KEYS[5] its held list (the queue while paused)
-- ARGV[1] job id
-- Returns 1, or 0 when the id is not in the dead-letter list (nothing changes).
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[3], 'status', 'pending', 'attempts', '0')
redis.call('HDEL', KEYS[3], 'error_code', 'error_message', 'finished_at', 'started_at', 'holder', 'cancel_requested')
redis.call('PERSIST', KEYS[3])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('RPUSH', KEYS[5], ARGV[1])
else
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
return 1
