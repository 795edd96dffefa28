-- Heartbeat (SPEC §4.3): extend the lease only while it still holds our token. Also reports the
-- record's cancel flag, so that a cancel whose PUBLISH was missed (a dropped subscriber
-- connection) is still seen within one heartbeat.
-- KEYS[1] lease, KEYS[2] job record
-- ARGV[1] lease token, ARGV[2] lease TTL in ms
-- Returns {held (0|1), cancel_requested (0|1)}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local c = redis.call('HGET', KEYS[2], 'cancel_requested')
if c == '1' then return {1, 1} end
return {1, 0}
