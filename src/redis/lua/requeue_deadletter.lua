-- Requeue a dead-lettered job (operators: relayctl deadletter requeue): out of the dead-letter
-- list, back at the end of pending with status pending and its crash count and error cleared.
-- KEYS[1] dead-letter list, KEYS[2] pending list, KEYS[3] job record, KEYS[4] the model's paused
-- flag, KEYS[5] its held list (the queue while paused)
-- ARGV[1] job id, ARGV[2] the request's token (random, the same on each retry of one request)
-- Returns 1, or 0 when the id is not in the dead-letter list (nothing changes). The record keeps
-- the token of the request that requeued it: that request's step retried after its reply was
-- lost finds the job gone from the list by its own hand and answers 1 again, where it answered
-- 0 (404 to the operator whose requeue had worked).
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  if redis.call('HGET', KEYS[3], 'requeued_by') == ARGV[2] then return 1 end
  return 0
end
redis.call('HSET', KEYS[3], 'status', 'pending', 'attempts', '0', 'requeued_by', ARGV[2])
redis.call('HDEL', KEYS[3], 'error_code', 'error_message', 'finished_at', 'started_at', 'holder', 'cancel_requested')
redis.call('PERSIST', KEYS[3])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('RPUSH', KEYS[5], ARGV[1])
else
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
return 1
