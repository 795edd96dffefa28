// The operator dashboard's API (/admin/api/...) and its page (/dashboard): what a queue's
// operator needs across tenants — queues per model, jobs per state, search by id or
// Idempotency-Key, a job's detail, cancel, requeue from the dead letter, pause and resume a
// model's intake. Its own keys (admin.api_keys), apart from tenants': role `admin` may change
// things, `read` may only look (403 otherwise).
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>

#include "common/job_id.hpp"
#include "common/random.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "gateway/api_steps.hpp"
#include "gateway/dashboard.hpp"
#include "gateway/throughput.hpp"

namespace relay::gateway {
namespace {

namespace json = boost::json;

constexpr long long kStateLimit = 100;
// Newest completion-stream entries read per model and refresh for its throughput: ~0.4 ms of
// Redis (finished_within).
constexpr std::size_t kFinishedSample = 1000;

// A job's JSON with the tenant it belongs to (the dashboard sees every tenant).
json::value admin_job(const JobRecord& rec) {
  auto v = json::parse(job_json(rec));
  v.as_object()["tenant"] = rec.tenant;
  return v;
}

Response json_response(json::value v, unsigned status = 200) {
  Response r;
  r.status = status;
  r.body = json::serialize(v);
  return r;
}

std::string param(const Request& req, std::string_view name) {
  auto target = boost::urls::parse_origin_form(req.target);
  if (!target) return {};
  auto it = target->params().find(name);
  return it == target->params().end() ? std::string() : std::string((*it).value);
}

}  // namespace

std::optional<std::string> Api::admin_role(const Request& req) const {
  std::string auth = req.header("authorization");
  std::string key;
  if (auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0))
    key = auth.substr(7);
  if (key.empty()) key = req.header("x-api-key");
  if (key.empty()) return std::nullopt;
  return api_keys_.operator_role(sha256_hex(key));
}

Response Api::dashboard_page() {
  if (!api_keys_.has_operators())
    return error_response(404, "not_found", "no dashboard: admin.api_keys is not configured");
  Response r;
  r.content_type = "text/html; charset=utf-8";
  r.headers.emplace_back("Cache-Control", "no-store");
  // Everything the page needs is in it: no CDN, no outside request (works offline).
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src "
                         "'unsafe-inline'; connect-src 'self'; img-src 'self' data:");
  r.body = dashboard_html();
  return r;
}

Response Api::admin(const Request& req, Context& ctx, const std::vector<std::string>& seg) {
  if (!api_keys_.has_operators())
    return error_response(404, "not_found", "no dashboard: admin.api_keys is not configured");
  const auto role = admin_role(req);
  if (!role) {
    auto r = error_response(401, "unauthorized", "an operator key (admin.api_keys) is required");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  const std::string& m = req.method;
  if (m == "POST" && *role != "admin")
    return error_response(403, "forbidden", "this operator key may only read");
  const auto models = cfg_.models();
  auto known_model = [&](const std::string& model) { return models.count(model) > 0; };
  // seg: "admin", "api", ...
  const std::vector<std::string> s(seg.begin() + 2, seg.end());

  // GET overview: per model, its queues, pause state, oldest wait and recent throughput.
  if (m == "GET" && s.size() == 1 && s[0] == "overview") {
    json::array out;
    step(ctx, [&](redis::JobStore& store, redis::Connection& c) {
      out.clear();
      for (const auto& model : models) {
        auto q = store.queue_depth(model);
        json::object o{{"model", model},
                       {"pending", q.pending},
                       {"processing", q.processing},
                       {"deadletter", q.deadletter}};
        json::array types;
        for (const auto& [name, st] : cfg_.service_types)
          if (st.model == model) types.push_back(json::value(name));
        o["service_types"] = types;
        o["held"] = q.held;
        o["retrying"] = q.retrying;
        o["paused"] = store.paused(model);
        o["oldest_wait_seconds"] = q.oldest_wait_seconds(wall_now());
        // Throughput from the newest entries of the completion stream (finished_within).
        const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        auto r = c.command(
            {"XREVRANGE", keys_.events(model), "+", "-", "COUNT", std::to_string(kFinishedSample)});
        std::vector<std::int64_t> times;
        times.reserve(r->elements);
        for (size_t i = 0; i < r->elements; ++i) {
          const std::string id = redis::as_string(r->element[i]->element[0]);  // "<ms>-<seq>"
          times.push_back(std::stoll(id.substr(0, id.find('-'))));
        }
        const bool full = times.size() == kFinishedSample;
        for (auto [name, window] : {std::pair{"finished_last_minute", 60'000LL},
                                    std::pair{"finished_last_15_minutes", 900'000LL}}) {
          const auto f = finished_within(times, full, now_ms, window);
          o[name] = f.count;
          o[std::string(name) + "_estimated"] = f.estimated;  // (the page shows "≈")
        }
        out.push_back(std::move(o));
      }
      return 0;
    });
    json::array tenants{json::value("default")};
    for (const auto& [hash, tenant] : cfg_.api_keys)
      if (std::find(tenants.begin(), tenants.end(), json::value(tenant)) == tenants.end())
        tenants.push_back(json::value(tenant));
    return json_response(json::object{{"role", *role}, {"models", out}, {"tenants", tenants}});
  }

  // GET models/{model}/jobs?state=pending|processing|deadletter|retrying|held
  if (m == "GET" && s.size() == 3 && s[0] == "models" && s[2] == "jobs") {
    const std::string& model = s[1];
    if (!known_model(model)) return error_response(404, "not_found", "no model '" + model + "'");
    const std::string state = param(req, "state");
    json::array jobs;
    step(ctx, [&](redis::JobStore& store, redis::Connection& c) {
      jobs.clear();
      std::vector<std::string> ids;
      const std::string limit = std::to_string(kStateLimit - 1);
      if (state == "pending" || state == "held")
        // The next to run first: pending is taken from the left.
        ids = redis::as_strings(
            c.command(
                 {"LRANGE", state == "held" ? keys_.held(model) : keys_.pending(model), "0", limit})
                .get());
      else if (state == "processing" || state == "deadletter")
        ids = redis::as_strings(
            c.command({"LRANGE",
                       state == "processing" ? keys_.processing(model) : keys_.deadletter(model),
                       "0", limit})
                .get());
      else if (state == "retrying")
        ids = redis::as_strings(c.command({"ZRANGE", keys_.retries(model), "0", limit}).get());
      else
        throw std::invalid_argument("state is pending, processing, deadletter, retrying or held");
      for (const auto& id : ids)
        if (auto rec = store.get(model, id))
          // (An ended job's id left deep in a long queue waits there for a take to drop it:
          // see cancel.lua. It is not queued.)
          if (!((state == "pending" || state == "held") && is_terminal(rec->status)))
            jobs.push_back(admin_job(*rec));
      return 0;
    });
    return json_response(json::object{{"jobs", jobs}});
  }

  // GET search?q=<job id or Idempotency-Key>: every model, every tenant.
  if (m == "GET" && s.size() == 1 && s[0] == "search") {
    const std::string q = param(req, "q");
    if (q.empty()) return error_response(400, "invalid_query", "q is a job id or Idempotency-Key");
    json::array jobs;
    step(ctx, [&](redis::JobStore& store, redis::Connection&) {
      jobs.clear();
      std::set<std::string> seen;  // without the hash tag every model's record key is the same
      auto add = [&](const JobRecord& rec) {
        if (seen.insert(rec.id).second) jobs.push_back(admin_job(rec));
      };
      std::set<std::string> tenants{"default"};
      for (const auto& [hash, tenant] : cfg_.api_keys) tenants.insert(tenant);
      for (const auto& model : models) {
        if (is_valid_job_id(q))
          if (auto rec = store.get(model, q); rec && rec->model == model) add(*rec);
        for (const auto& tenant : tenants)
          if (auto id = store.idempotent_job(keys_.idempotency(model, tenant, sha256_hex(q))))
            if (auto rec = store.get(model, *id)) add(*rec);
      }
      return 0;
    });
    return json_response(json::object{{"jobs", jobs}});
  }

  // GET jobs?tenant=&status=&...: a tenant's listing (GET /jobs, as that tenant).
  if (m == "GET" && s.size() == 1 && s[0] == "jobs") {
    const std::string tenant = param(req, "tenant");
    if (tenant.empty()) return error_response(400, "invalid_tenant", "tenant is required");
    Context as_tenant{ctx.conn, tenant};
    return list_jobs(req, as_tenant, param(req, "service_type"));
  }

  // jobs/{model}/{id}: GET its detail; POST .../cancel.
  if (s.size() >= 3 && s[0] == "jobs" && known_model(s[1]) && is_valid_job_id(s[2])) {
    const std::string &model = s[1], &id = s[2];
    auto rec =
        step(ctx, [&](redis::JobStore& store, redis::Connection&) { return store.get(model, id); });
    if (!rec || rec->model != model) return error_response(404, "job_not_found", "no job " + id);
    if (m == "GET" && s.size() == 3) return json_response(admin_job(*rec));
    if (m == "POST" && s.size() == 4 && s[3] == "cancel") {
      auto c = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
        return store.cancel_job(model, rec->service_type, id);  // (with the record after it)
      });
      if (c.outcome == redis::CancelOutcome::terminal)
        return error_response(409, "job_already_ended", "the job has ended");
      return json_response(admin_job(c.record.value_or(*rec)),
                           c.outcome == redis::CancelOutcome::cancelled ? 200 : 202);
    }
  }

  // POST models/{model}/deadletter/requeue[?id=...] (all without id); pause; resume.
  if (m == "POST" && s.size() >= 3 && s[0] == "models" && known_model(s[1])) {
    const std::string& model = s[1];
    if (s.size() == 4 && s[2] == "deadletter" && s[3] == "requeue") {
      const std::string only = param(req, "id");
      // One token for the request, whatever step() retries: a retry after a lost reply finds
      // the job it requeued (lua/requeue_deadletter.lua) rather than answer 404.
      const std::string token = random_hex(8);
      std::int64_t n = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
        return only.empty() ? store.requeue_deadletter_all(model, token)
                            : std::int64_t{store.requeue_deadletter(model, only, token)};
      });
      if (!only.empty() && n == 0)
        return error_response(404, "job_not_found", "no job " + only + " in the dead letter");
      return json_response(json::object{{"requeued", n}});
    }
    if (s.size() == 3 && (s[2] == "pause" || s[2] == "resume")) {
      const bool pause = s[2] == "pause";
      auto moved = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
        return store.set_paused(model, pause);
      });
      log::info(pause ? "model paused" : "model resumed", {{"model", model}, {"jobs", moved}});
      return json_response(json::object{{"model", model}, {"paused", pause}, {"moved", moved}});
    }
  }
  return error_response(404, "not_found", "no such admin route");
}

}  // namespace relay::gateway
