#pragma once
// Every multi-key step is one Lua script, so that it is atomic (SPEC §4). Each states its KEYS,
// ARGV and result. Status strings are the job states of SPEC §2.

#include <string_view>

namespace relay::redis::lua {

// Submit: the record and the queue entry appear together or not at all (SPEC §4.1).
// KEYS[1] job record, KEYS[2] pending list
// ARGV[1] job id, ARGV[2] "L" (priority: LPUSH) or "R" (RPUSH), ARGV[3..] field, value pairs
// Returns 1, or 0 when a record with this id exists already (nothing is written then).
inline constexpr std::string_view kSubmit = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[2] == 'L' then redis.call('LPUSH', KEYS[2], ARGV[1]) else redis.call('RPUSH', KEYS[2], ARGV[1]) end
return 1
)lua";

// Dequeue bookkeeping, run right after BLMOVE pending -> processing (SPEC §4.2): take the lease
// and mark the record processing. Until this runs the id sits in processing without a lease;
// the reaper tolerates that window (it reaps only ids seen lease-less on two passes).
// KEYS[1] job record, KEYS[2] processing list, KEYS[3] lease
// ARGV[1] job id, ARGV[2] lease token, ARGV[3] lease TTL in ms, ARGV[4] now (RFC 3339)
// Returns {'ok', <HGETALL of the record>...}; {'missing'} when the record is gone, or
// {'terminal', status} when the job already ended (a cancelled job, say) — in both cases the id
// is taken out of processing and no lease is written.
inline constexpr std::string_view kBegin = R"lua(
local st = redis.call('HGET', KEYS[1], 'status')
if not st then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  return {'missing'}
end
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  redis.call('LREM', KEYS[2], 1, ARGV[1])
  return {'terminal', st}
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'processing', 'started_at', ARGV[4], 'holder', ARGV[2])
local out = {'ok'}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
)lua";

// Heartbeat (SPEC §4.3): extend the lease only while it still holds our token. Also reports the
// record's cancel flag, so that a cancel whose PUBLISH was missed (a dropped subscriber
// connection) is still seen within one heartbeat.
// KEYS[1] lease, KEYS[2] job record
// ARGV[1] lease token, ARGV[2] lease TTL in ms
// Returns {held (0|1), cancel_requested (0|1)}.
inline constexpr std::string_view kHeartbeat = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local c = redis.call('HGET', KEYS[2], 'cancel_requested')
if c == '1' then return {1, 1} end
return {1, 0}
)lua";

// The relay's last step: complete, fail or cancel (SPEC §4.4). The record and the events stream
// make the completion durable; the PUBLISH (at-most-once) stays for live listeners.
// KEYS[1] job record, KEYS[2] lease, KEYS[3] processing list, KEYS[4] events stream
// ARGV[1] job id, ARGV[2] lease token, ARGV[3] terminal status, ARGV[4] completed channel,
// ARGV[5] completion payload (JSON), ARGV[6] events stream max length (approximate),
// ARGV[7..] field, value pairs to set on the record
// Returns 'ok'; 'terminal' if the job had ended already, 'lease_lost' if our lease is gone
// (the job may belong to another relay now), 'missing' if the record is gone. In all but 'ok'
// nothing is written: no double completion.
inline constexpr std::string_view kFinish = R"lua(
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 'missing' end
if st == 'completed' or st == 'failed' or st == 'cancelled' then return 'terminal' end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 'lease_lost' end
local fields = {'status', ARGV[3]}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'job_id', ARGV[1], 'status', ARGV[3])
redis.call('LREM', KEYS[3], 1, ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 'ok'
)lua";

// Give back on SIGTERM mid-job (SPEC §5): the job goes back to the front of pending at once,
// instead of waiting for its lease to expire and the reaper to count an attempt.
// KEYS[1] job record, KEYS[2] lease, KEYS[3] processing list, KEYS[4] pending list
// ARGV[1] job id, ARGV[2] lease token
// Returns 1, or 0 when the lease is no longer ours (then nothing is written).
inline constexpr std::string_view kGiveBack = R"lua(
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' or st == 'cancelled' then return 0 end
redis.call('LREM', KEYS[3], 1, ARGV[1])
redis.call('LPUSH', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'pending')
redis.call('HDEL', KEYS[1], 'started_at', 'holder')
return 1
)lua";

}  // namespace relay::redis::lua
