-- Cancel (seed "Cancellation", SPEC §4.7). A pending job still in the pending list is removed
-- from it and marked cancelled at once, with its terminal event and completion PUBLISH. Otherwise
-- (processing, or taken from pending by a relay that has not marked it yet) the cancel flag is
-- set and the id is published on the relay's cancel channel: the relay reads the flag when it
-- takes the job and on every heartbeat, and listens to the channel.
-- A job waiting for its retry (in the retries set) is cancelled at once the same way.
-- KEYS[1] job record, KEYS[2] pending list, KEYS[3] events stream, KEYS[4] retries (sorted set),
-- KEYS[5] the model's held list (a paused model's queue)
-- ARGV[1] job id, ARGV[2] now (RFC 3339), ARGV[3] completed channel, ARGV[4] cancel channel,
-- ARGV[5] events stream max length, ARGV[6] completion payload (JSON)
-- Returns {'cancelled' | 'requested' | 'terminal' (already ended: nothing changes), <HGETALL of
-- the record after the step>} or {'missing'}. (The record comes with the outcome, not from a
-- read pipelined after it: a script missing from the cache is sent again after the calls behind
-- it, which would read the record before the step.)
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'missing'} end
local tag = 'terminal'
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  tag = 'terminal'
elseif st == 'pending' and (redis.call('LREM', KEYS[2], 1, ARGV[1]) == 1 or
                           redis.call('LREM', KEYS[5], 1, ARGV[1]) == 1 or
                           redis.call('ZREM', KEYS[4], ARGV[1]) == 1) then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', ARGV[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'job_id', ARGV[1], 'status', 'cancelled')
  redis.call('PUBLISH', ARGV[3], ARGV[6])
  tag = 'cancelled'
else
  redis.call('HSET', KEYS[1], 'cancel_requested', '1')
  redis.call('PUBLISH', ARGV[4], ARGV[1])
  tag = 'requested'
end
return {tag, redis.call('HGETALL', KEYS[1])}
