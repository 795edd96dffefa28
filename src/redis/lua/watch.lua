-- Watch (the gateway, when a live event stream or a long-poll waits on a job that has not
-- ended): flags the record so that the steps that change it without ending it (take, begin,
-- progress, retry, reap) announce the change on the job's changed channel, and its end is
-- announced on its done channel (settle.lua). Unwatched jobs cost no PUBLISH. A waiter reads
-- the job after flagging it (a long-poll in the same round trip), so an end just before the
-- flag is never missed; the notifier keeps the ends it heard with nobody waiting for a while,
-- for a long-poll that registers just after (gateway/notifier.hpp).
-- The flag stays with the record; a stale one only costs a message nobody reads.
-- KEYS[1] job record
-- ARGV[1], ARGV[2] (optional) the tenant and service type the waiter asked as: a record of
-- another is left unflagged (a long-poll flags and reads in one round trip, before it checks)
-- Returns the record's status, or false when the record is gone (nothing is created). An ended
-- job, or one of another tenant or service type, is not flagged.
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'service_type')
local st = rec[1]
if not st then return false end
if st == 'completed' or st == 'failed' or st == 'cancelled' then return st end
if ARGV[1] and ((rec[2] or '') ~= ARGV[1] or (rec[3] or '') ~= ARGV[2]) then return st end
redis.call('HSET', KEYS[1], 'watched', '1')
return st
