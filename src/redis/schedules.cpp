#include "redis/schedules.hpp"

#include <charconv>

#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"

namespace relay::redis {
namespace {

constexpr std::string_view kUploadPrefix = "upload:";

long long to_ll(std::string_view s) {
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
  return as_strings(r.get());
}

std::vector<Delivery> Schedules::deliveries(const std::string& model,
                                            const std::vector<std::string>& ids) {
  if (ids.empty()) return {};
  std::vector<Connection::Call> reads;
  reads.reserve(ids.size());
  for (const auto& id : ids) reads.push_back({nullptr, {}, {"HGETALL", keys_.webhook(model, id)}});
  auto found = conn_.pipeline(reads);
  std::vector<Delivery> out;
  // Each found delivery's job record; each vanished one unscheduled.
  std::vector<Connection::Call> next;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto pairs = as_pair_views(found[i].get());
    if (pairs.empty()) {
      next.push_back({nullptr, {}, {"ZREM", keys_.webhooks_due(model), ids[i]}});
      continue;
    }
    Delivery d{model, ids[i], {}, {}, {}, 0, 0, {}};
    for (const auto& [k, v] : pairs) {
      if (k == "url")
        d.url = v;
      else if (k == "job_key")
        d.job_key = v;
      else if (k == "status")
        d.status = v;
      else if (k == "created_ms")
        d.created_ms = to_ll(v);
      else if (k == "attempts")
        d.attempts = to_ll(v);
      else if (k == "event" && !v.empty())
        d.event = v;
    }
    next.push_back({nullptr, {}, {"HGETALL", d.job_key}});
    out.push_back(std::move(d));
  }
  auto jobs = conn_.pipeline(next);
  std::size_t j = 0;
  for (std::size_t i = 0; i < next.size(); ++i) {
    if (next[i].args[0] != "HGETALL") continue;
    out[j++].job = JobRecord::from_fields(as_pair_views(jobs[i].get()));
  }
  return out;
}

Connection::Call Schedules::webhook_outcome_call(const Keys& keys, const Delivery& d,
                                                 const std::string& outcome, long long next_due_ms,
                                                 long long attempts, std::string last) {
  return {&lua::webhook_outcome,
          {keys.webhooks_due(d.model), keys.webhook(d.model, d.id), d.job_key},
          {d.id, outcome, std::to_string(next_due_ms), std::to_string(attempts), std::move(last)}};
}

void Schedules::defer_webhooks(const std::string& model, const std::vector<std::string>& ids,
                               long long due_ms) {
  if (ids.empty()) return;
  // XX: a delivery that finished meanwhile (another replica) is not brought back.
  std::vector<std::string> argv{"ZADD", keys_.webhooks_due(model), "XX"};
  for (const auto& id : ids) {
    argv.push_back(std::to_string(due_ms));
    argv.push_back(id);
  }
  conn_.command(argv);
}

std::vector<GcItem> Schedules::gc_due(const std::string& model, long long now_ms, int limit) {
  const std::string due_key = keys_.gc_due(model);
  auto due = conn_.command({"ZRANGEBYSCORE", due_key, "-inf", std::to_string(now_ms), "LIMIT", "0",
                            std::to_string(limit)});
  std::vector<GcItem> out;
  // "<model>/<service_type>/<id>", or with "upload:" before it (hold_upload)
  for (const auto& member : as_strings(due.get())) {
    const bool upload = member.starts_with(kUploadPrefix);
    const std::string_view item =
        std::string_view(member).substr(upload ? kUploadPrefix.size() : 0);
    auto a = item.find('/'), b = item.rfind('/');
    if (a == std::string::npos || a == b) {
      conn_.command({"ZREM", due_key, member});
      continue;
    }
    out.push_back({std::string(item.substr(0, a)), std::string(item.substr(a + 1, b - a - 1)),
                   std::string(item.substr(b + 1)), member, upload});
  }
  return out;
}

std::string Schedules::upload_member(std::string_view model, std::string_view service_type,
                                     std::string_view job_id) {
  std::string m(kUploadPrefix);
  m.append(model).append("/").append(service_type).append("/").append(job_id);
  return m;
}

void Schedules::hold_upload(const std::string& model, const std::string& service_type,
                            const std::string& job_id, long long due_ms) {
  conn_.command({"ZADD", keys_.gc_due(model), std::to_string(due_ms),
                 upload_member(model, service_type, job_id)});
}

bool Schedules::job_exists(const std::string& model, const std::string& job_id) {
  return as_integer(conn_.command({"EXISTS", keys_.job(model, job_id)}).get()) == 1;
}

void Schedules::release_upload(const std::string& model, const std::string& service_type,
                               const std::string& job_id) {
  conn_.command({"ZREM", keys_.gc_due(model), upload_member(model, service_type, job_id)});
}

void Schedules::gc_done(const std::vector<GcItem>& items) {
  if (items.empty()) return;
  // (Items come from one due set, gc_due(model): with the hash tag one model's, all its keys in
  // its slot; without, one set and one slot-less Redis for every model.)
  Connection::Call del{nullptr, {}, {"DEL"}},
      zrem{nullptr, {}, {"ZREM", keys_.gc_due(items[0].model)}};
  for (const auto& item : items) {
    del.args.push_back(keys_.webhook(item.model, JobStore::webhook_id(item.job_id)));
    zrem.args.push_back(item.member);
  }
  conn_.pipeline({std::move(del), std::move(zrem)});
}

}  // namespace relay::redis
