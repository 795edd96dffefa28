-- Pause or resume a model's intake (the dashboard). While paused, the model's queue is its held
-- list: submissions, give-backs, requeues and retries go there, pending stays empty, so relays
-- take nothing and the scaler (KEDA counts pending) starts no pod. Jobs already processing
-- finish. Resuming puts the held jobs back in pending, in order, ahead of any that arrived there
-- meanwhile (from an older binary, say).
-- KEYS[1] the model's paused flag, KEYS[2] pending list, KEYS[3] held list
-- ARGV[1] 'pause' or 'resume'
-- Returns the number of jobs moved.
if ARGV[1] == 'pause' then
  redis.call('SET', KEYS[1], '1')
  local n = redis.call('LLEN', KEYS[2])
  if n == 0 then return 0 end
  if redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('RENAME', KEYS[2], KEYS[3])
  else
    for _ = 1, n do redis.call('RPOPLPUSH', KEYS[2], KEYS[3]) end
  end
  return n
end
redis.call('DEL', KEYS[1])
local n = redis.call('LLEN', KEYS[3])
if n == 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('RENAME', KEYS[3], KEYS[2])
else
  for _ = 1, n do redis.call('RPOPLPUSH', KEYS[3], KEYS[2]) end
end
return n
