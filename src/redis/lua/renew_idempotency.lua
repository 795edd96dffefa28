-- Idempotency-Key reservation (gateway): keeps a reservation alive while its upload progresses,
-- and gives it the job's retention once the job exists. Only the request that holds the key
-- may renew it: if it expired and another request reserved it meanwhile, nothing changes.
-- KEYS[1] the Idempotency-Key's key
-- ARGV[1] job id (the holder), ARGV[2] new TTL in ms
-- Returns 1 if renewed, 0 if the key is gone or held by another request.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
