-- Cancel (seed "Cancellation", SPEC §4.7). A pending job still in the pending list is removed
-- from it and marked cancelled at once, with its terminal event and completion PUBLISH. Otherwise
-- (processing, or taken from pending by a relay that has not marked it yet) the cancel flag is
-- set and the id is published on the relay's cancel channel: the relay reads the flag when it
-- takes the job and on every heartbeat, and listens to the channel.
-- A job waiting for its retry (in the retries set) is cancelled at once the same way.
-- A queue is looked at only within `near` entries of either end (LREM walks from the end it
-- starts at, and the whole list when the id is not in it: 15–29 ms in a million-entry queue, with
-- Redis serving nothing else). A pending job found in neither end, nor waiting for its retry,
-- nor taken, lies deep in a long queue: it is cancelled where it lies and its id added to the
-- model's dropped set; a take drops it when it reaches the head (take.lua, begin.lua), and the
-- queue's depth leaves it out meanwhile.
-- KEYS[1] job record, KEYS[2] pending list, KEYS[3] events stream, KEYS[4] retries (sorted set),
-- KEYS[5] the model's held list (a paused model's queue), KEYS[6] processing list, KEYS[7] the
-- model's dropped set
-- ARGV[1] job id, ARGV[2] now (RFC 3339), ARGV[3] completed channel, ARGV[4] cancel channel,
-- ARGV[5] events stream max length, ARGV[6] completion payload (JSON)
-- Returns {'cancelled' | 'requested' | 'terminal' (already ended: nothing changes), <HGETALL of
-- the record after the step>} or {'missing'}. (The record comes with the outcome, not from a
-- read pipelined after it: a script missing from the cache is sent again after the calls behind
-- it, which would read the record before the step.)
--#include unqueue
-- A pending job that is nowhere but deep in a queue: dropped where it lies. (Taken, it is in
-- processing between its BLMOVE and begin.lua: the relay is asked, as for a running job.)
local function drop_deep()
  if redis.call('LPOS', KEYS[6], ARGV[1]) then return false end
  redis.call('SADD', KEYS[7], ARGV[1])
  return true
end
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'missing'} end
local tag = 'terminal'
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  tag = 'terminal'
elseif st == 'pending' and (unqueue(2) or unqueue(5) or
                           redis.call('ZREM', KEYS[4], ARGV[1]) == 1 or drop_deep()) then
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
