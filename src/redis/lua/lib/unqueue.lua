-- unqueue(k): takes the id ARGV[1] out of the list KEYS[k] if it lies within `near` entries of
-- either end (LPOS bounded by MAXLEN, then LREM from the end it was found at, which stops at its
-- first match); true if it did. (LREM alone walks from the head to the id, and the whole list
-- when the id is not in it.) Shared by cancel.lua and expire.lua: src/CMakeLists.txt puts it
-- where a script says `--#include unqueue`.
local near = 500
local function unqueue(k)
  if redis.call('LPOS', KEYS[k], ARGV[1], 'MAXLEN', near) then
    return redis.call('LREM', KEYS[k], 1, ARGV[1]) == 1
  end
  if redis.call('LPOS', KEYS[k], ARGV[1], 'RANK', -1, 'MAXLEN', near) then
    return redis.call('LREM', KEYS[k], -1, ARGV[1]) == 1
  end
  return false
end
