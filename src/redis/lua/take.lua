-- Take (SPEC §4.2, busy path): when jobs are waiting, LMOVE pending -> processing LEFT RIGHT,
-- take the lease and mark the record processing in one step — the same move as the seed's
-- BLMOVE, with no lease-less window. The relay falls back to a blocking BLMOVE + begin.lua only
-- when the queue is empty.
-- Every key a step touches is declared in KEYS (Redis Cluster and managed services require it),
-- so the caller names candidates: the ids it last saw at the head of pending (a plain LRANGE
-- sent right behind its last take or finish). The script takes whichever job is at the head, if
-- it is one of them. With many relays the head moves between a look and a take; naming several
-- ids keeps a take from missing it (one candidate made four busy relays look again most of the
-- time). The order stays strictly FIFO: only the head is ever taken.
-- KEYS[1] pending list, KEYS[2] processing list, KEYS[3] the taker's copy of the record it
-- takes (Keys::taken: one per relay slot), KEYS[4] the model's dropped set (a stale head dropped
-- leaves it: see cancel.lua), then for candidate i (from 1): KEYS[3 + 2i] its job record,
-- KEYS[4 + 2i] its lease
-- ARGV[1] lease token, ARGV[2] lease TTL in ms, ARGV[3] now (RFC 3339), ARGV[4] the job records'
-- key prefix (a record's key is it and the id), ARGV[5] and ARGV[6] what comes before and after
-- the id in a job's changed channel (announced on only when a live event stream watches the
-- job). A candidate is its two keys alone: every argument costs Redis a conversion, and a take
-- names up to 32 candidates.
-- Returns {'empty'}; {'raced'} (the head is not a candidate) or {'stale'} (heads whose records
-- were gone or terminal dropped, up to one that is not a candidate) — look again; or
-- {'ok', id, i}, i being the
-- candidate the head was (how far the head moved since the relay looked: the relay asks for as
-- many candidates as it needs by it).
-- The next candidates are not returned: the caller's LRANGE behind this call reads them as a
-- plain command, where each id returned from here cost Redis two conversions (into Lua and out:
-- ~4 µs per take of 16 ids, and the look inside finish.lua as much).
-- The record taken is not returned either: it is copied to KEYS[3], which a plain HGETALL sent
-- behind this call reads. A 22-field record returned from here cost Redis ~10 µs in
-- conversions (into Lua and out, each string hashed on the way in), the copy and its expiry ~1.5
-- and the plain read ~2.5. (A relay cannot read the record itself behind the call: which job
-- the take finds is known only from its reply.) The copy expires with the lease.
-- A head whose job is gone or ended (cancelled or expired deep in the queue: cancel.lua) is
-- dropped, and the next looked at, as long as the heads are candidates: a run of them costs one
-- take, not a take each.
local head, i, st, rec
local dropped = false
while true do
  head = redis.call('LINDEX', KEYS[1], 0)
  if not head then return {'empty'} end
  local head_key = ARGV[4] .. head
  i = 0
  for c = 1, (#KEYS - 4) / 2 do
    if KEYS[3 + 2 * c] == head_key then i = c break end
  end
  if i == 0 then return {dropped and 'stale' or 'raced'} end
  rec = redis.call('HMGET', KEYS[3 + 2 * i], 'status', 'watched')
  st = rec[1]
  if st and st ~= 'completed' and st ~= 'failed' and st ~= 'cancelled' then break end
  redis.call('LPOP', KEYS[1])
  redis.call('SREM', KEYS[4], head)
  dropped = true
end
redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
redis.call('SET', KEYS[4 + 2 * i], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[3 + 2 * i], 'status', 'processing', 'started_at', ARGV[3],
           'holder', ARGV[1])
if rec[2] then redis.call('PUBLISH', ARGV[5] .. head .. ARGV[6], 'processing') end
redis.call('COPY', KEYS[3 + 2 * i], KEYS[3], 'REPLACE')
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {'ok', head, i}
