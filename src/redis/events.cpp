#include "redis/events.hpp"

#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"

namespace relay::redis {
namespace {

// [[entry_id, [field, value, ...]], ...] -> events (entries without a job_id are skipped: a
// trimmed or foreign entry; they are still acknowledged by whoever reads them).
void parse_entries(const std::string& model, const redisReply* entries, std::vector<Event>& out) {
  for (size_t i = 0; entries && entries->type == REDIS_REPLY_ARRAY && i < entries->elements; ++i) {
    const redisReply* entry = entries->element[i];
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2) continue;
    Event ev{model, as_string(entry->element[0]), {}, {}, {}, {}};
    for (auto& [k, v] : as_pairs(entry->element[1])) {
      if (k == "job_id")
        ev.job_id = std::move(v);
      else if (k == "status")
        ev.status = std::move(v);
      else if (k == "timings")
        ev.timings = std::move(v);
      else if (k == "traceparent")
        ev.traceparent = std::move(v);
    }
    out.push_back(std::move(ev));
  }
}

}  // namespace

void EventLog::ensure_group(const std::string& model) {
  try {
    conn_.command({"XGROUP", "CREATE", keys_.events(model), group_, "0", "MKSTREAM"});
  } catch (const ReplyError& e) {
    if (std::string_view(e.what()).find("BUSYGROUP") == std::string_view::npos) throw;
  }
}

Connection::Call EventLog::xreadgroup(const std::vector<std::string>& models,
                                      const std::string& consumer, int count,
                                      std::chrono::milliseconds block, const char* from) const {
  Connection::Call call{
      nullptr, {}, {"XREADGROUP", "GROUP", group_, consumer, "COUNT", std::to_string(count)}};
  auto& argv = call.args;
  if (block.count() > 0) {
    argv.push_back("BLOCK");
    argv.push_back(std::to_string(block.count()));
  }
  argv.push_back("STREAMS");
  for (const auto& m : models) argv.push_back(keys_.events(m));
  for (size_t i = 0; i < models.size(); ++i) argv.push_back(from);
  return call;
}

Connection::Call EventLog::read_call(const std::vector<std::string>& models,
                                     const std::string& consumer, int count,
                                     std::chrono::milliseconds block) const {
  return xreadgroup(models, consumer, count, block, ">");
}

Connection::Call EventLog::pending_call(const std::vector<std::string>& models,
                                        const std::string& consumer, int count) const {
  return xreadgroup(models, consumer, count, {}, "0");
}

std::vector<Event> EventLog::parse_read(const std::vector<std::string>& models,
                                        const redisReply* r) const {
  throw_if_error(r);
  std::vector<Event> out;
  if (r->type != REDIS_REPLY_ARRAY) return out;  // nil: nothing new
  for (size_t s = 0; s < r->elements; ++s) {
    const redisReply* per_stream = r->element[s];
    if (per_stream->type != REDIS_REPLY_ARRAY || per_stream->elements != 2) continue;
    std::string stream = as_string(per_stream->element[0]);
    for (const auto& m : models)
      if (keys_.events(m) == stream) parse_entries(m, per_stream->element[1], out);
  }
  return out;
}

std::vector<Event> EventLog::claim_idle(const std::string& model, const std::string& consumer,
                                        std::chrono::milliseconds idle, int count) {
  auto r = conn_.command({"XAUTOCLAIM", keys_.events(model), group_, consumer,
                          std::to_string(idle.count()), "0-0", "COUNT", std::to_string(count)});
  std::vector<Event> out;
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) parse_entries(model, r->element[1], out);
  return out;
}

Connection::Call EventLog::settle_call(const std::string& model, const std::vector<Event>& batch,
                                       std::chrono::milliseconds retention) const {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  Connection::Call call{
      &lua::settle,
      {keys_.events(model), keys_.webhooks_due(model), keys_.gc_due(model)},
      {group_, std::to_string(now.count()), std::to_string(retention.count()), model}};
  call.keys.reserve(call.keys.size() + 2 * batch.size());
  call.args.reserve(call.args.size() + 5 * batch.size());
  for (const auto& e : batch) {
    const std::string delivery = e.job_id.empty() ? "" : JobStore::webhook_id(e.job_id);
    call.keys.push_back(keys_.job(model, e.job_id));
    call.keys.push_back(keys_.webhook(model, delivery));
    call.args.insert(call.args.end(),
                     {e.entry_id, e.job_id, e.status, keys_.job_done_channel(e.job_id), delivery});
  }
  return call;
}

std::vector<std::string> EventLog::parse_settle(const redisReply* r, size_t entries) {
  throw_if_error(r);
  auto tenants = as_strings(r);
  if (tenants.size() != entries) throw ReplyError("settle: unexpected reply");
  return tenants;
}

}  // namespace relay::redis
