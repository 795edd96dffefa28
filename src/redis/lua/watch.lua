-- Watch (the gateway, when a live event stream or a long-poll waits on a job that has not
-- ended): flags the record so that the steps that change it without ending it (take, begin,
-- progress, retry, reap) announce the change on the job's changed channel, and its end is
-- announced on its done channel (settle.lua). Unwatched jobs cost no PUBLISH. A waiter reads
-- the job again after flagging it and registering with the notifier, so an end just before
-- the flag is never missed.
-- The flag stays with the record; a stale one only costs a message nobody reads.
-- KEYS[1] job record
-- Returns the record's status, or false when the record is gone (nothing is created).
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return false end
redis.call('HSET', KEYS[1], 'watched', '1')
return st
