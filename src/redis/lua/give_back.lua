-- Give back on SIGTERM mid-job (SPEC §5): the job goes back to the front of pending at once,
-- instead of waiting for its lease to expire and the reaper to count an attempt. Also a job
-- taken ahead (relay.take_ahead) whose slot's running job outlasted take_ahead, never started.
-- KEYS[1] job record, KEYS[2] lease, KEYS[3] processing list, KEYS[4] pending list,
-- KEYS[5] the model's paused flag, KEYS[6] its held list (the queue while paused)
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] the job's changed channel (announced on only
-- when a live event stream watches it)
-- Returns 1, or 0 when the lease is no longer ours (then nothing is written).
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' or st == 'cancelled' then return 0 end
redis.call('LREM', KEYS[3], 1, ARGV[1])
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('LPUSH', KEYS[6], ARGV[1])
else
  redis.call('LPUSH', KEYS[4], ARGV[1])
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'pending')
redis.call('HDEL', KEYS[1], 'started_at', 'holder')
if redis.call('HEXISTS', KEYS[1], 'watched') == 1 then redis.call('PUBLISH', ARGV[3], 'pending') end
return 1
