-- Watch (the gateway, when a live event stream or a long-poll waits on a job that has not
-- ended): flags the record so that the steps that change it without ending it (take, begin,
-- progress, retry, reap) announce the change on the job's changed channel, and its end is
-- announced on its done channel (settle.lua). Unwatched jobs cost no PUBLISH. A waiter reads
-- the job as this step leaves it, so an end just before the flag is never missed; the notifier keeps the ends it heard with nobody waiting for a while,
-- for a long-poll that registers just after (gateway/notifier.hpp).
-- The flag stays with the record; a stale one only costs a message nobody reads.
-- KEYS[1] job record
-- ARGV[1], ARGV[2] (optional) the tenant and service type the waiter asked as: a record of
-- another is left unflagged (a long-poll flags and reads in one step, before it checks)
-- Returns the record as the step left it (HGETALL; empty when the record is gone: nothing is
-- created). An ended job, or one of another tenant or service type, is not flagged. (The record
-- comes with the step, not from a read pipelined after it: a script missing from Redis's cache
-- is sent again after the calls behind it, which would read the record before the flag.)
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'service_type', 'watched')
local st = rec[1]
if not st then return {} end
local ended = st == 'completed' or st == 'failed' or st == 'cancelled'
local other = ARGV[1] and ((rec[2] or '') ~= ARGV[1] or (rec[3] or '') ~= ARGV[2])
-- (Flagged already — a client long-polling again — no write: nothing for a replica, and it
-- works while Redis is out of memory.)
if not ended and not other and not rec[4] then redis.call('HSET', KEYS[1], 'watched', '1') end
return redis.call('HGETALL', KEYS[1])
