-- The relay's last step: complete, fail or cancel (SPEC §4.4). The record and the events stream
-- make the completion durable; the PUBLISH (at-most-once) stays for live listeners.
-- KEYS[1] job record, KEYS[2] lease, KEYS[3] processing list, KEYS[4] events stream
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] terminal status, ARGV[4] completed channel,
-- ARGV[5] completion payload (JSON), ARGV[6] events stream max length (approximate),
-- ARGV[7] the job's done channel, ARGV[8..] field, value pairs to set on the record
-- The events entry carries the job's timings and traceparent besides its id and status, for the
-- gateway's stage histograms and log lines (no read of the record per completion).
-- A job something waits on (flagged watched: a long-poll, an event stream, a submission with
-- Prefer: wait) has its end announced here on its done channel, with its record (a JSON array
-- of field, value; params left out: they are the client's own and may be large): the gateway
-- answers its waiters from that, without a read, and without waiting for its consumer's
-- settle, which announces the end again (and every end that is not a relay's).
-- (The relay's look at the head of pending for its next take is a plain LRANGE sent behind this
-- call: each id returned from here cost Redis two conversions, into Lua and out.)
-- Returns {'ok'}; {'terminal'} if the job had ended
-- already, {'lease_lost'} if our lease is gone (the job may belong to another relay now),
-- {'missing'} if the record is gone. In all but 'ok' nothing is written: no double completion.
local rec = redis.call('HMGET', KEYS[1], 'status', 'traceparent', 'watched')
local st = rec[1]
if not st then return {'missing'} end
if st == 'completed' or st == 'failed' or st == 'cancelled' then return {'terminal'} end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return {'lease_lost'} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], unpack(ARGV, 8))
local timings = ''
for i = 8, #ARGV - 1, 2 do
  if ARGV[i] == 'timings' then timings = ARGV[i + 1] end
end
local trace = rec[2] or ''
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'job_id', ARGV[1], 'status', ARGV[3],
           'timings', timings, 'traceparent', trace)
redis.call('LREM', KEYS[3], 1, ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
if rec[3] then
  local all, shown = redis.call('HGETALL', KEYS[1]), {}
  for i = 1, #all, 2 do
    if all[i] ~= 'params' then
      shown[#shown + 1] = all[i]
      shown[#shown + 1] = all[i + 1]
    end
  end
  redis.call('PUBLISH', ARGV[7], cjson.encode(shown))
end
return {'ok'}
