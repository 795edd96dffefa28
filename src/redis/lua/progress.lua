-- Progress (the model's report, throttled by the relay): recorded on the job while our lease
-- holds, and announced on the job's changed channel when a live event stream watches it. Fenced
-- like the heartbeat: a relay that lost the job writes nothing.
-- KEYS[1] lease, KEYS[2] job record
-- ARGV[1] lease token, ARGV[2] fraction ('' when the report had none), ARGV[3] message,
-- ARGV[4] now (RFC 3339), ARGV[5] the job's changed channel
-- Returns the number of reports recorded for the job so far, or 0 when the lease is not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[2], 'progress')
else
  redis.call('HSET', KEYS[2], 'progress', ARGV[2])
end
redis.call('HSET', KEYS[2], 'progress_message', ARGV[3], 'progress_at', ARGV[4], 'progress_holder', ARGV[1])
local seq = redis.call('HINCRBY', KEYS[2], 'progress_seq', 1)
if redis.call('HEXISTS', KEYS[2], 'watched') == 1 then redis.call('PUBLISH', ARGV[5], 'progress') end
return seq
