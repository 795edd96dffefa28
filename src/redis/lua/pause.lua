-- Pause or resume a model's intake (the dashboard). While paused, the model's queue is its held
-- list: submissions, give-backs, requeues and retries go there, pending stays empty, so relays
-- take nothing and the scaler (KEDA counts pending) starts no pod. Jobs already processing
-- finish. Pausing puts pending's jobs in the held list ahead of any already there; resuming
-- puts the held jobs back in pending, in order, ahead of any that arrived there meanwhile (from
-- an older binary, say).
-- KEYS[1] the model's paused flag, KEYS[2] pending list, KEYS[3] held list
-- ARGV[1] 'pause' or 'resume'
-- Returns the number of jobs moved.

-- join(a, b, into): the list KEYS[a]'s entries then KEYS[b]'s as one list under KEYS[into] (a or
-- b), the other gone. The shorter list's entries move one at a time onto the longer's end, and a
-- RENAME puts the whole under KEYS[into]: when both hold jobs this costs the shorter list's
-- length, not the longer's (a queue of a million behind a handful that arrived during a pause:
-- a million moves, 0.96 s of Redis doing nothing else, measured, until 2026-12-07).
local function join(a, b, into)
  local na, nb = redis.call('LLEN', KEYS[a]), redis.call('LLEN', KEYS[b])
  if na + nb == 0 then return end
  local whole = b
  if na <= nb then
    for _ = 1, na do redis.call('LMOVE', KEYS[a], KEYS[b], 'RIGHT', 'LEFT') end
  else
    for _ = 1, nb do redis.call('LMOVE', KEYS[b], KEYS[a], 'LEFT', 'RIGHT') end
    whole = a
  end
  if whole ~= into then redis.call('RENAME', KEYS[whole], KEYS[into]) end
end

if ARGV[1] == 'pause' then
  redis.call('SET', KEYS[1], '1')
  local n = redis.call('LLEN', KEYS[2])
  if n > 0 then join(2, 3, 3) end
  return n
end
redis.call('DEL', KEYS[1])
local n = redis.call('LLEN', KEYS[3])
if n > 0 then join(3, 2, 2) end
return n
