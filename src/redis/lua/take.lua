-- Take (SPEC §4.2, busy path): when jobs are waiting, LMOVE pending -> processing LEFT RIGHT,
-- take the lease and mark the record processing in one step — the same move as the seed's
-- BLMOVE, with no lease-less window. The relay falls back to a blocking BLMOVE + begin.lua only
-- when the queue is empty.
-- The caller names the id it expects at the head of pending (LINDEX pending 0), so that the
-- job and lease keys are declared in KEYS like every other key a step touches (Redis Cluster
-- and managed services require it); if another relay took that id first, nothing happens and
-- the caller looks again.
-- KEYS[1] pending list, KEYS[2] processing list, KEYS[3] job record, KEYS[4] lease
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] lease TTL in ms, ARGV[4] now (RFC 3339),
-- ARGV[5] the job's changed channel (announced on only when a live event stream watches it)
-- Returns {'empty'}, {'raced'} (the head is another id: look again), {'stale'} (the id's record
-- is gone or terminal: dropped from the queue; look again), or {'ok', <HGETALL of the record>...}.
local head = redis.call('LINDEX', KEYS[1], 0)
if not head then return {'empty'} end
if head ~= ARGV[1] then return {'raced'} end
redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
local st = redis.call('HGET', KEYS[3], 'status')
if not st or st == 'completed' or st == 'failed' or st == 'cancelled' then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  return {'stale'}
end
redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[3], 'status', 'processing', 'started_at', ARGV[4], 'holder', ARGV[2])
if redis.call('HEXISTS', KEYS[3], 'watched') == 1 then redis.call('PUBLISH', ARGV[5], 'processing') end
local out = {'ok'}
for _, v in ipairs(redis.call('HGETALL', KEYS[3])) do out[#out + 1] = v end
return out
