-- Submit: the record and the queue entry appear together or not at all (SPEC §4.1), and with an
-- Idempotency-Key, the key names the job from the same step (so that two requests with one key
-- make one job, without a round trip of their own before the input is stored).
-- KEYS[1] job record, KEYS[2] pending list, KEYS[3] expiries (sorted set), KEYS[4] the model's
-- paused flag, KEYS[5] its held list (while paused, the queue is the held list; see pause.lua),
-- KEYS[6] the objects due for deletion (sorted set), KEYS[7] (with an Idempotency-Key only) the
-- key's key
-- ARGV[1] job id, ARGV[2] "L" (priority: LPUSH) or "R" (RPUSH), ARGV[3] the queue deadline in
-- ms since the epoch ("" when the job has no ttl), ARGV[4] the member by which a large upload
-- held its input for deletion should its gateway die before this step ("" when none: see
-- Schedules::hold_upload), released here with the job's creation, ARGV[5] how long the
-- Idempotency-Key names the job, ms ("" without one), ARGV[6..] field, value pairs
-- Returns 1; 0 when a record with this id exists already; or, when the Idempotency-Key names
-- another job (its request came first), that job's id. Nothing is written but for 1.
if KEYS[7] then
  -- (Held by this id: reserved by its upload before the body came, or a retried step.)
  local holder = redis.call('GET', KEYS[7])
  if holder and holder ~= ARGV[1] then return holder end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
-- (unpack from 6 rather than a copy of the pairs: every value copied in Lua cost Redis ~0.1 µs)
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[6], ARGV[4]) end
if redis.call('EXISTS', KEYS[4]) == 1 then
  if ARGV[2] == 'L' then redis.call('LPUSH', KEYS[5], ARGV[1]) else redis.call('RPUSH', KEYS[5], ARGV[1]) end
elseif ARGV[2] == 'L' then
  redis.call('LPUSH', KEYS[2], ARGV[1])
else
  redis.call('RPUSH', KEYS[2], ARGV[1])
end
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1]) end
if KEYS[7] then redis.call('SET', KEYS[7], ARGV[1], 'PX', ARGV[5]) end
return 1
