-- Take (SPEC §4.2, busy path): when jobs are waiting, LMOVE pending -> processing LEFT RIGHT,
-- take the lease and mark the record processing in one step — the same move as the seed's
-- BLMOVE, one round trip cheaper, and with no lease-less window. The relay falls back to a
-- blocking BLMOVE + begin.lua only when the queue is empty.
-- Stale entries (record gone, or job already terminal) are dropped from processing and skipped.
-- The job and lease keys are built from the id, as asynq's dequeue does; with redis.hash_tag
-- they share the model's slot with KEYS[1] and KEYS[2].
-- KEYS[1] pending list, KEYS[2] processing list
-- ARGV[1] job key prefix, ARGV[2] lease key prefix, ARGV[3] lease token, ARGV[4] lease TTL in
-- ms, ARGV[5] now (RFC 3339)
-- Returns {'empty'}, or {'ok', id, <HGETALL of the record>...}.
for _ = 1, 100 do
  local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not id then return {'empty'} end
  local job = ARGV[1] .. id
  local st = redis.call('HGET', job, 'status')
  if st and st ~= 'completed' and st ~= 'failed' and st ~= 'cancelled' then
    redis.call('SET', ARGV[2] .. id, ARGV[3], 'PX', ARGV[4])
    redis.call('HSET', job, 'status', 'processing', 'started_at', ARGV[5], 'holder', ARGV[3])
    local out = {'ok', id}
    for _, v in ipairs(redis.call('HGETALL', job)) do out[#out + 1] = v end
    return out
  end
  redis.call('LREM', KEYS[2], 1, id)
end
return {'empty'}
