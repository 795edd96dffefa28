-- The gateway's side of terminal transitions (SPEC §4.5), for a batch of entries its consumer
-- group read from one model's events stream. For each job: wake its long-polls and event streams
-- (PUBLISH on its done channel) when any are waiting — they flag the record first (watch.lua),
-- so a job nobody waits on costs no message to every gateway's notifier; schedule its terminal webhook once, when it has a callback_url that wants it
-- (schedule_webhook.lua does the same for the opt-in events); set its record to expire after
-- gc.job_retention and queue its objects for deletion. Then acknowledge every entry. One call
-- per batch, where a job cost five round trips before. Each part is idempotent, so an entry
-- handled but not acknowledged (a crashed gateway) costs nothing when it is claimed again.
-- KEYS[1] events stream, KEYS[2] webhook deliveries due (sorted set), KEYS[3] GC due (sorted
-- set), then for entry i (from 1): KEYS[2 + 2i] the job record, KEYS[3 + 2i] its terminal
-- webhook delivery (hash)
-- ARGV[1] consumer group, ARGV[2] now (ms), ARGV[3] retention (ms), ARGV[4] model, then for
-- entry i, from b = 5i: ARGV[b] entry id, ARGV[b + 1] job id ('' for an entry that names none:
-- it is only acknowledged), ARGV[b + 2] status, ARGV[b + 3] the job's done channel,
-- ARGV[b + 4] the webhook delivery id
-- Returns, per entry, the job's tenant ('' when the record is gone or the entry names no job).
local now, retention = tonumber(ARGV[2]), tonumber(ARGV[3])
local tenants, acks = {}, {}
for i = 1, (#ARGV - 4) / 5 do
  local b = 5 * i
  local id, status = ARGV[b + 1], ARGV[b + 2]
  acks[#acks + 1] = ARGV[b]
  tenants[i] = ''
  if id ~= '' then
    local rec = redis.call('HMGET', KEYS[2 + 2 * i], 'service_type', 'tenant', 'callback_url',
                           'webhook_events', 'watched')
    -- (A record gone already, or written before waiters flagged it: published as before.)
    if not rec[1] or rec[5] then redis.call('PUBLISH', ARGV[b + 3], status) end
    if rec[1] then
      tenants[i] = rec[2] or ''
      local url, wanted = rec[3], rec[4]
      if not wanted or wanted == '' then wanted = 'terminal' end
      if url and url ~= '' and string.find(',' .. wanted .. ',', ',terminal,', 1, true) and
          redis.call('EXISTS', KEYS[3 + 2 * i]) == 0 then
        redis.call('HSET', KEYS[3 + 2 * i], 'url', url, 'job_key', KEYS[2 + 2 * i], 'status',
                   status, 'created_ms', ARGV[2], 'attempts', 0, 'event', 'terminal')
        redis.call('ZADD', KEYS[2], ARGV[2], ARGV[b + 4])
        redis.call('HSET', KEYS[2 + 2 * i], 'webhook_status', 'scheduled')
      end
      redis.call('PEXPIRE', KEYS[2 + 2 * i], retention)
      redis.call('ZADD', KEYS[3], 'NX', now + retention, ARGV[4] .. '/' .. rec[1] .. '/' .. id)
    end
  end
end
if #acks > 0 then redis.call('XACK', KEYS[1], ARGV[1], unpack(acks)) end
return tenants
