#include "redis/schedules.hpp"

#include <charconv>
#include <map>

#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"

namespace relay::redis {
namespace {

constexpr std::string_view kUploadPrefix = "upload:";

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
  return as_strings(r.get());
}

std::optional<Delivery> Schedules::delivery(const std::string& model, const std::string& id) {
  auto pairs = as_pairs(conn_.command({"HGETALL", keys_.webhook(model, id)}).get());
  std::map<std::string, std::string> f(pairs.begin(), pairs.end());
  if (f.empty()) {
    conn_.command({"ZREM", keys_.webhooks_due(model), id});
    return std::nullopt;
  }
  Delivery out{
      model, id, f["url"], f["job_key"], f["status"], to_ll(f["created_ms"]), to_ll(f["attempts"]),
      {}};
  out.event = f["event"].empty() ? "terminal" : f["event"];
  auto job = conn_.command({"HGETALL", out.job_key});
  out.job = JobRecord::from_fields(as_pair_views(job.get()));
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

void Schedules::gc_done(const GcItem& item) {
  conn_.command({"DEL", keys_.webhook(item.model, JobStore::webhook_id(item.job_id))});
  conn_.command({"ZREM", keys_.gc_due(item.model), item.member});
}

}  // namespace relay::redis
