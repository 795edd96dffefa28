-- Claim due webhook deliveries (SPEC §8): each claimed id is pushed lock_ms into the future, so
-- no other replica sends it meanwhile; if this one dies mid-delivery, the claim lapses and
-- another retries it, with the same webhook-id.
-- KEYS[1] deliveries due (sorted set)
-- ARGV[1] now (ms), ARGV[2] lock (ms), ARGV[3] how many at most
-- Returns the claimed delivery ids.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
end
return ids
