-- Pause or resume a model's intake (the dashboard, relayctl). While paused, the model's queue is
-- its held list: submissions, give-backs, requeues and retries go there, pending stays empty,
-- so relays take nothing and the scaler (KEDA counts pending) starts no pod. Jobs already
-- processing finish. Resuming puts the held jobs back in pending, in order, ahead of any that
-- arrived there meanwhile.
-- KEYS[1] the model's paused flag, KEYS[2] pending list, KEYS[3] held list
-- ARGV[1] 'pause' or 'resume'
-- Returns the number of jobs moved.
local from, to = KEYS[2], KEYS[3]
if ARGV[1] == 'pause' then
  redis.call('SET', KEYS[1], '1')
else
  redis.call('DEL', KEYS[1])
  from, to = KEYS[3], KEYS[2]
end
local n = redis.call('LLEN', from)
if n == 0 then return 0 end
if redis.call('EXISTS', to) == 0 then
  redis.call('RENAME', from, to)
  return n
end
-- Both hold jobs (pending filled by an older binary while paused, say): the moved ones go in
-- front, in their order.
for _ = 1, n do redis.call('RPOPLPUSH', from, to) end
return n
