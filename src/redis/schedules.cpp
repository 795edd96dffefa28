#include "redis/schedules.hpp"

#include <charconv>
#include <map>

#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"

namespace relay::redis {
namespace {

long long to_ll(const std::string& s) {
  long long v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

}  // namespace

std::vector<std::string> Schedules::claim_webhooks(const std::string& model, long long now_ms,
                                                   std::chrono::milliseconds lock, int limit) {
  auto r =
      conn_.eval(lua::claim_webhooks, {keys_.webhooks_due(model)},
                 {std::to_string(now_ms), std::to_string(lock.count()), std::to_string(limit)});
  std::vector<std::string> ids;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i)
    ids.push_back(as_string(r->element[i]));
  return ids;
}

std::optional<Delivery> Schedules::delivery(const std::string& model, const std::string& id) {
  auto d = conn_.command({"HGETALL", keys_.webhook(model, id)});
  std::map<std::string, std::string> f;
  for (size_t i = 0; d->type == REDIS_REPLY_ARRAY && i + 1 < d->elements; i += 2)
    f[as_string(d->element[i])] = as_string(d->element[i + 1]);
  if (f.empty()) {
    conn_.command({"ZREM", keys_.webhooks_due(model), id});
    return std::nullopt;
  }
  Delivery out{
      model, id, f["url"], f["job_key"], f["status"], to_ll(f["created_ms"]), to_ll(f["attempts"]),
      {}};
  auto rec = conn_.command({"HGETALL", out.job_key});
  Fields fields;
  for (size_t i = 0; rec->type == REDIS_REPLY_ARRAY && i + 1 < rec->elements; i += 2)
    fields.emplace_back(as_string(rec->element[i]), as_string(rec->element[i + 1]));
  out.job = JobRecord::from_fields(fields);
  return out;
}

void Schedules::webhook_outcome(const Delivery& d, const std::string& outcome,
                                long long next_due_ms, long long attempts,
                                const std::string& last) {
  conn_.eval(lua::webhook_outcome,
             {keys_.webhooks_due(d.model), keys_.webhook(d.model, d.id), d.job_key},
             {d.id, outcome, std::to_string(next_due_ms), std::to_string(attempts), last});
}

void Schedules::defer_webhook(const std::string& model, const std::string& id, long long due_ms) {
  // XX: a delivery that finished meanwhile (another replica) is not brought back.
  conn_.command({"ZADD", keys_.webhooks_due(model), "XX", std::to_string(due_ms), id});
}

std::vector<GcItem> Schedules::gc_due(const std::string& model, long long now_ms, int limit) {
  const std::string due_key = keys_.gc_due(model);
  auto due = conn_.command({"ZRANGEBYSCORE", due_key, "-inf", std::to_string(now_ms), "LIMIT", "0",
                            std::to_string(limit)});
  std::vector<GcItem> out;
  for (size_t i = 0; due->type == REDIS_REPLY_ARRAY && i < due->elements; ++i) {
    std::string member = as_string(due->element[i]);  // "<model>/<service_type>/<id>"
    auto a = member.find('/'), b = member.rfind('/');
    if (a == std::string::npos || a == b) {
      conn_.command({"ZREM", due_key, member});
      continue;
    }
    out.push_back(
        {member.substr(0, a), member.substr(a + 1, b - a - 1), member.substr(b + 1), member});
  }
  return out;
}

void Schedules::gc_done(const GcItem& item) {
  conn_.command({"DEL", keys_.webhook(item.model, JobStore::webhook_id(item.job_id))});
  conn_.command({"ZREM", keys_.gc_due(item.model), item.member});
}

}  // namespace relay::redis
