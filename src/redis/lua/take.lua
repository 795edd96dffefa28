-- Take (SPEC §4.2, busy path): when jobs are waiting, LMOVE pending -> processing LEFT RIGHT,
-- take the lease and mark the record processing in one step — the same move as the seed's
-- BLMOVE, with no lease-less window. The relay falls back to a blocking BLMOVE + begin.lua only
-- when the queue is empty.
-- Every key a step touches is declared in KEYS (Redis Cluster and managed services require it),
-- so the caller names candidates: the ids it last saw at the head of pending (finish.lua and
-- this script return them). The script takes whichever job is at the head, if it is one of
-- them. With many relays the head moves between a look and a take; naming several ids keeps a
-- take from missing it (one candidate made four busy relays look again most of the time). The
-- order stays strictly FIFO: only the head is ever taken.
-- KEYS[1] pending list, KEYS[2] processing list, then for candidate i (from 1): KEYS[1 + 2i]
-- its job record, KEYS[2 + 2i] its lease
-- ARGV[1] lease token, ARGV[2] lease TTL in ms, ARGV[3] now (RFC 3339), ARGV[4] how many ids
-- to return as the next candidates, ARGV[5] the job records' key prefix (a record's key is it
-- and the id), ARGV[6] and ARGV[7] what comes before and after the id in a job's changed
-- channel (announced on only when a live event stream watches the job). A candidate is its two
-- keys alone: every argument costs Redis a conversion, and a take names up to 64 candidates.
-- Returns {'empty'}; {'raced', <ids at the head now>...} (the head is not a candidate) or
-- {'stale', <ids>...} (the head's record is gone or terminal: dropped from the queue) — look
-- again with those; or {'ok', id, i, n, <n ids at the head after the take>..., {<HGETALL of the
-- record>}}, i being the candidate the head was (how far the head moved since the relay
-- looked: the relay asks for as many candidates as it needs by it).
-- One LRANGE is the look: the head, and behind it the ids returned as the next candidates.
local want = tonumber(ARGV[4])
local seen = redis.call('LRANGE', KEYS[1], 0, want)
local head = seen[1]
if not head then return {'empty'} end
-- tag, then up to want ids of seen from position first on
local function reply(tag, first)
  local out = {tag}
  for k = first, math.min(#seen, first + want - 1) do out[#out + 1] = seen[k] end
  return out
end
local head_key = ARGV[5] .. head
local i = 0
for c = 1, (#KEYS - 2) / 2 do
  if KEYS[1 + 2 * c] == head_key then i = c break end
end
if i == 0 then return reply('raced', 1) end
redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
local rec = redis.call('HMGET', KEYS[1 + 2 * i], 'status', 'watched')
local st = rec[1]
if not st or st == 'completed' or st == 'failed' or st == 'cancelled' then
  redis.call('LREM', KEYS[2], 1, head)
  return reply('stale', 2)
end
redis.call('SET', KEYS[2 + 2 * i], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[1 + 2 * i], 'status', 'processing', 'started_at', ARGV[3], 'holder', ARGV[1])
if rec[2] then redis.call('PUBLISH', ARGV[6] .. head .. ARGV[7], 'processing') end
local out = {'ok', head, i, 0}
for k = 2, math.min(#seen, want + 1) do out[#out + 1] = seen[k] end
out[4] = #out - 4
-- The record as one nested array: appending its fields one by one to out cost Redis a quarter
-- of this script's time.
out[#out + 1] = redis.call('HGETALL', KEYS[1 + 2 * i])
return out
