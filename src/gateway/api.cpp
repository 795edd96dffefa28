#include "gateway/api.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>

#include "common/errors.hpp"
#include "common/job_id.hpp"
#include "common/log.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "common/utf8.hpp"
#include "crypto/primed_source.hpp"
#include "gateway/api_steps.hpp"
#include "gateway/metrics.hpp"
#include "gateway/openapi.hpp"
#include "redis/job_store.hpp"
#include "redis/retry.hpp"
#include "storage/resuming_source.hpp"

namespace relay::gateway {
namespace {

namespace json = boost::json;

// An encrypted result's length, from its ciphertext's; a size no ciphertext has is damage.
std::uint64_t result_plaintext_size(std::uint64_t stored, const crypto::StreamingParams& p) {
  auto plain = crypto::plaintext_size(stored, p);
  if (!plain) throw crypto::DecryptionError("the stored result has a size no ciphertext has");
  return *plain;
}

}  // namespace

std::string origin_form(std::string_view target) {
  if (target.starts_with('/')) return std::string(target);
  auto u = boost::urls::parse_absolute_uri(target);
  if (!u || (u->scheme() != "http" && u->scheme() != "https")) return std::string(target);
  std::string out(u->encoded_path());
  if (out.empty()) out = "/";
  if (u->has_query()) out += "?" + std::string(u->encoded_query());
  return out;
}

Response error_response(unsigned status, const std::string& code, const std::string& message,
                        json::object details) {
  Response r;
  r.status = status;
  json::object error{{"code", code}, {"message", message}};
  for (auto& [k, v] : details) error[k] = std::move(v);
  r.body = json::serialize(json::object{{"error", std::move(error)}});
  // Every 503 says when to come back (README, API): a passing state on the server's side.
  if (status == 503) r.headers.emplace_back("Retry-After", "2");
  return r;
}

namespace {
void set_retry_after(Response& r, const std::string& seconds) {
  for (auto& [k, v] : r.headers)
    if (k == "Retry-After") v = seconds;
}

// A route asked with a method it does not have: 405 with the methods it has (RFC 9110 requires
// Allow; HEAD is GET's, see the server).
Response method_not_allowed(const char* allow, const std::string& message) {
  auto r = error_response(405, "method_not_allowed", message);
  r.headers.emplace_back("Allow", allow);
  return r;
}

// /healthz, /readyz, /metrics, /openapi.json: GET (and HEAD) only, without a key.
bool is_probe(const std::vector<std::string>& seg) {
  return seg.size() == 1 && (seg[0] == "healthz" || seg[0] == "readyz" || seg[0] == "metrics" ||
                             seg[0] == "openapi.json");
}

// The methods a route has (its Allow), by the shape of its path alone — an OPTIONS request,
// a browser's preflight among them, comes without a key; nullptr: no such route. (The
// operator's routes are not listed: the dashboard calls them from the gateway's own origin.)
const char* methods_of(const std::vector<std::string>& seg) {
  constexpr const char* kRead = "GET, HEAD, OPTIONS";
  if (is_probe(seg)) return kRead;
  if (seg.empty() || seg[0] != "jobs") return nullptr;
  switch (seg.size()) {
    case 1:
      return kRead;
    case 2:
      return "GET, HEAD, POST, OPTIONS";
    case 3:
      return "GET, HEAD, DELETE, OPTIONS";
    case 4:
      return seg[3] == "events" || seg[3] == "result" ? kRead : nullptr;
    default:
      return nullptr;
  }
}

// Every method the server has, for `OPTIONS *` (RFC 9110 §9.3.7: the server's, not a route's).
constexpr const char* kAllMethods = "GET, HEAD, POST, DELETE, OPTIONS";

// How long /readyz and /metrics wait for Redis, to connect and for each reply: within a
// Prometheus scrape's timeout (10 s by default) with room, and above a healthy Redis's longest
// stalls (a fork), so that a busy Redis does not take every gateway out of its Service at once.
// (Kubernetes's readiness probe gives 1 s by default: a Redis that stops answering fails it
// either way.)
constexpr auto kProbeWait = redis::kLeastReadWait;

// A client's download of a result: a dropped storage connection is resumed (five tries in a
// row), but a read that has not got going again 15 s after it stalled is given up on: with S3
// gone silent each try waits out storage.s3_timeout (30 s), and five held the client and a
// storage thread 2.5 min before the 503 (or, mid-body, the cut).
constexpr storage::Persistence kDownloadPersistence{.attempts = storage::ResumingSource::kAttempts,
                                                    .limit = std::chrono::seconds(15)};

redis::Endpoint probe_endpoint(redis::Endpoint ep) {
  ep.connect_timeout = std::min(ep.connect_timeout, kProbeWait);
  ep.read_timeout = kProbeWait;
  return ep;
}

// Request connections wait for a reply what a step's first try gets (redis::with_retry).
redis::Endpoint request_endpoint(redis::Endpoint ep, std::chrono::milliseconds retry_timeout) {
  ep.read_timeout = redis::try_wait(retry_timeout);
  return ep;
}
}  // namespace

Api::Api(const Config& config, storage::Storage& storage, const crypto::Encryption& encryption,
         http::Resolver& resolver, Unsettled& unsettled)
    : cfg_(config),
      storage_(storage),
      enc_(encryption),
      resolver_(resolver),
      unsettled_(unsettled),
      redis_(request_endpoint(config.redis.endpoint(), config.redis_retry_timeout)),
      probe_redis_(probe_endpoint(config.redis.endpoint())),
      keys_(config.redis.keys()),
      api_keys_(config.tenant_keys(), config.operator_keys()),
      cors_(config.cors_origins) {
  if (config.redis.endpoint().cluster_seeds.empty() || config.redis.wait_replicas == 0)
    submits_ = std::make_unique<redis::Batcher>(
        config.redis.endpoint(), config.redis.wait_replicas,
        // A batch is waited for as a request's step is (redis.retry_timeout), not kReadTimeout.
        std::clamp(config.redis_retry_timeout, redis::kLeastReadWait, redis::kReadTimeout));
}

std::optional<std::string> Api::tenant_of(const Request& req) const {
  if (!cfg_.auth_enabled) return std::string("default");
  std::string key = req.header("x-api-key");
  if (key.empty()) {
    std::string auth = req.header("authorization");
    if (auth.size() > 7 &&
        (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0))
      key = auth.substr(7);
  }
  if (key.empty()) return std::nullopt;
  // Keys are stored as SHA-256 digests; what is compared is a digest, so the lookup's timing
  // reveals nothing about the key itself.
  return api_keys_.tenant(sha256_hex(key));
}

Api::Pool Api::pool_for(const Request& req) {
  const std::string_view path = std::string_view(req.target).substr(0, req.target.find('?'));
  const auto depth = std::count(path.begin(), path.end(), '/');
  // (What the route checks of the parts is checked there.)
  if (req.method == "POST" && path.starts_with("/jobs/") && depth == 2)
    return Pool::storage;  // a submission: its input stored (its Redis step never waited on)
  if (req.method != "GET" || req.has_body) return Pool::requests;
  if (path == "/readyz" || path == "/metrics") return Pool::probes;
  if (path.starts_with("/jobs/") && path.ends_with("/result") && depth == 4)
    return Pool::storage;  // a result's download
  return Pool::requests;
}

std::optional<Response> Api::answer_at_once(const Request& req) const {
  if (req.method == "OPTIONS" && !req.has_body) return options(req);
  if (req.method != "GET" || req.has_body) return std::nullopt;
  const std::string_view path = std::string_view(req.target).substr(0, req.target.find('?'));
  Response r;
  if (path == "/healthz") {
    r.body = R"({"status":"ok"})";
    r.route = "GET /healthz";
    return r;
  }
  if (path == "/openapi.json") {
    r.body = openapi_json();
    r.route = "GET /openapi.json";
    return r;
  }
  return std::nullopt;
}

Response Api::handle(const Request& req, bool again) {
  auto conn = redis_.borrow();
  Context ctx{*conn, {}, req.since};
  try {
    return route(req, ctx, again);
  } catch (...) {
    // Whatever a failed step left on the connection (a reply in flight) is not the next
    // request's.
    conn->reset();
    return failure(std::current_exception(), req.target);
  }
}

Response Api::failure(std::exception_ptr e, std::string_view target) {
  try {
    std::rethrow_exception(e);
  } catch (const redis::IoError& e) {
    log::warn("redis unavailable", {{"error", e.what()}});
    auto r = error_response(503, "redis_unavailable", "the job store is unavailable; retry later");
    set_retry_after(r, "1");
    return r;
  } catch (const redis::ReplyError& e) {
    // Redis refused a step for a reason that is not passing (a misconfigured ACL, a bug): a
    // server-side failure, never the client's 4xx. (Out of memory passes: retried, then 503
    // redis_unavailable as for an outage.)
    log::error("redis error", {{"error", e.what()}});
    auto r = error_response(503, "redis_error", "the job store refused the request; retry later");
    set_retry_after(r, "5");
    return r;
  } catch (const storage::StorageError& e) {
    log::error("storage unavailable", {{"error", e.what()}});
    return error_response(503, "storage_unavailable", "storage is unavailable; retry later");
  } catch (const Aborted&) {
    // A shutdown past its deadline stopped the request's wait for Redis (stop_waiting).
    auto r = error_response(503, "shutting_down", "the gateway is shutting down; retry");
    set_retry_after(r, "1");
    r.close = true;
    return r;
  } catch (const std::exception& e) {
    // A surprise while handling the request: nothing was kept (a submission removes what it
    // stored); answer, and close, since what the connection carries next is unknown.
    log::warn("request failed",
              {{"error", e.what()}, {"target", std::string(target.substr(0, 200))}});
    auto r = error_response(400, "bad_request", e.what());
    r.close = true;
    return r;
  }
}

Response Api::options(const Request& req) const {
  const char* methods = kAllMethods;
  if (req.target != "*") {
    auto target = boost::urls::parse_origin_form(req.target);
    if (!target) return error_response(400, "bad_request", "malformed request target");
    std::vector<std::string> seg;
    for (auto s : target->segments()) seg.push_back(std::string(s));
    methods = methods_of(seg);
  }
  if (!methods) return error_response(404, "not_found", "no such route");
  Response r;
  r.status = 204;
  r.content_type.clear();
  r.route = "OPTIONS";
  r.headers.emplace_back("Allow", methods);
  // A preflight (WHATWG Fetch §3.2.2): a browser asking whether a page on `origin` may send
  // the request it holds.
  const std::string origin = req.header("origin");
  if (origin.empty() || req.header("access-control-request-method").empty()) return r;
  auto cors = cors_.for_preflight(origin, methods, req.header("access-control-request-headers"));
  if (!cors)
    return error_response(403, "origin_not_allowed",
                          "pages on " + origin.substr(0, 200) +
                              " may not call this API from a browser (server.cors_origins)");
  r.headers.insert(r.headers.end(), cors->begin(), cors->end());
  return r;
}

void Api::decorate(const Request& req, Response& r) const {
  if (req.method == "OPTIONS" || req.target.starts_with("/admin/") ||
      req.target.starts_with("/dashboard"))
    return;
  for (auto& h : cors_.for_answer(req.header("origin"))) r.headers.push_back(std::move(h));
}

Response Api::route(const Request& req, Context& ctx, bool again) {
  auto with_route = [](Response r, const char* route) {
    r.route = route;
    return r;
  };
  const std::string& m = req.method;
  if (m == "OPTIONS") return options(req);  // (with a body; see answer_at_once)
  auto target = boost::urls::parse_origin_form(req.target);
  if (!target) return error_response(400, "bad_request", "malformed request target");
  std::vector<std::string> seg;
  for (auto s : target->segments()) seg.push_back(std::string(s));

  if (is_probe(seg) && m != "GET") return method_not_allowed(methods_of(seg), "use GET");
  if (seg.size() == 1 && m == "GET") {
    if (seg[0] == "healthz") {
      Response r;
      r.body = R"({"status":"ok"})";
      return with_route(std::move(r), "GET /healthz");
    }
    if (seg[0] == "readyz") return with_route(ready(), "GET /readyz");
    if (seg[0] == "metrics") return with_route(metrics_text(), "GET /metrics");
    if (seg[0] == "openapi.json") {
      Response r;
      r.body = openapi_json();
      return with_route(std::move(r), "GET /openapi.json");
    }
  }
  if (seg.size() == 1 && seg[0] == "dashboard" && m == "GET")
    return with_route(dashboard_page(), "GET /dashboard");
  if (seg.size() >= 2 && seg[0] == "admin" && seg[1] == "api")
    return with_route(admin(req, ctx, seg), "/admin/api");
  if (seg.empty() || seg[0] != "jobs" || seg.size() > 4)
    return error_response(404, "not_found", "no such route");

  // Everything under /jobs needs a tenant.
  auto tenant = tenant_of(req);
  if (!tenant) {
    auto r = error_response(401, "unauthorized",
                            "a valid API key is required (Authorization: Bearer <key>)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  ctx.tenant = *tenant;
  if (seg.size() == 1) {
    if (m == "GET") return with_route(list_jobs(req, ctx, ""), "GET /jobs");
    return method_not_allowed(methods_of(seg), "use GET to list jobs");
  }
  const std::string& svc = seg[1];
  if (!cfg_.service_types.count(svc))
    return error_response(404, "unknown_service_type", "no service type '" + svc + "'");
  if (seg.size() == 2) {
    if (m == "POST") return with_route(submit(req, ctx, svc), "POST /jobs/{service_type}");
    if (m == "GET") return with_route(list_jobs(req, ctx, svc), "GET /jobs/{service_type}");
    return method_not_allowed(methods_of(seg), "use POST to submit a job, GET to list");
  }
  const std::string& id = seg[2];
  if (!is_valid_job_id(id))
    return error_response(400, "invalid_id", "job ids are UUIDs (v4, lowercase)");
  // No other route takes a body: the server drops what it read of one, or closes.
  if (seg.size() == 3) {
    if (m == "GET")
      return with_route(get_job(req, ctx, svc, id, again), "GET /jobs/{service_type}/{id}");
    if (m == "DELETE")
      return with_route(cancel(req, ctx, svc, id), "DELETE /jobs/{service_type}/{id}");
    return method_not_allowed(methods_of(seg), "use GET or DELETE");
  }
  if ((seg[3] == "events" || seg[3] == "result") && m != "GET")
    return method_not_allowed(methods_of(seg), "use GET");
  if (seg[3] == "events" && m == "GET")
    return with_route(job_events(req, ctx, svc, id, again), "GET /jobs/{service_type}/{id}/events");
  if (seg[3] == "result" && m == "GET")
    return with_route(get_result(req, ctx, svc, id), "GET /jobs/{service_type}/{id}/result");
  return error_response(404, "not_found", "no such route");
}

namespace {

// A job as GET shows it; for the read of a submission that waits, with the submission's status
// (the server adds the submission's headers: its Location, Idempotent-Replayed).
Response job_response(const Request& req, const JobRecord& rec) {
  Response r;
  r.body = job_json(rec);
  if (req.after_submit) r.status = is_terminal(rec.status) ? 200 : 202;
  return r;
}

}  // namespace

std::optional<Response> Api::answer_from_notice(const Request& req,
                                                const std::string& notice) const {
  if (notice.empty() || notice.front() != '[') return std::nullopt;  // not a record
  JobRecord rec;
  try {
    boost::system::error_code ec;
    const json::value v = json::parse(notice, ec);
    if (ec || !v.is_array() || v.get_array().size() % 2 != 0) return std::nullopt;
    FieldViews fields;
    const auto& a = v.get_array();
    for (std::size_t i = 0; i < a.size(); i += 2) {
      if (!a[i].is_string() || !a[i + 1].is_string()) return std::nullopt;
      fields.emplace_back(a[i].get_string(), a[i + 1].get_string());
    }
    rec = JobRecord::from_fields(fields);
  } catch (const std::exception&) {  // (RecordError: the read will say what is wrong)
    return std::nullopt;
  }
  // The job the request waits on, ended, and still the asker's (a key revoked meanwhile is not).
  auto target = boost::urls::parse_origin_form(req.target);
  if (!target || !is_terminal(rec.status)) return std::nullopt;
  std::vector<std::string> seg;
  for (auto s : target->segments()) seg.push_back(std::string(s));
  if (seg.size() != 3 || seg[0] != "jobs" || seg[1] != rec.service_type || seg[2] != rec.id)
    return std::nullopt;
  if (tenant_of(req) != rec.tenant) return std::nullopt;
  Response r = job_response(req, rec);
  r.route = "GET /jobs/{service_type}/{id}";
  return r;
}

Response Api::get_job(const Request& req, Context& ctx, const std::string& svc,
                      const std::string& id, bool again) {
  std::chrono::milliseconds wait{0};
  auto target = boost::urls::parse_origin_form(req.target);
  if (auto it = target->params().find("wait"); it != target->params().end()) {
    std::string v((*it).value);
    auto d = parse_duration(v);
    if (!d || *d > cfg_.max_wait)
      return error_response(400, "invalid_wait",
                            "wait is a number of seconds up to " + format_duration(cfg_.max_wait));
    wait = *d;
  }
  // (The server keeps a waiting submission's deadline; any wait makes this read flag the job.)
  if (req.after_submit) wait = std::chrono::milliseconds(1);
  const bool watch = wait.count() > 0 && !again;
  auto answer = [&req, tenant = ctx.tenant, svc, id, wait,
                 watch](const std::optional<JobRecord>& rec) {
    if (!rec || rec->tenant != tenant || rec->service_type != svc)
      return error_response(404, "job_not_found", "no job " + id);
    Response r = job_response(req, *rec);
    if (watch && !is_terminal(rec->status)) {
      r.wait_job = id;
      r.wait_until = std::chrono::steady_clock::now() + wait;
    }
    return r;
  };
  return read_job(req, ctx, svc, id, watch, answer);
}

// About to wait: a job's end must be announced (a job nobody waits on is not); a live event
// stream's changes too. Flagged and read in one step (watch.lua): an end after the flag is
// announced, one before it is in the record. The flag is a write: it goes with other requests'
// steps while no thread waits (with Redis pausing writes, each long-poll held a request thread).
// A step that goes with other requests' in the group commit (Response::answer), answered from
// its reply on the server's I/O thread; a reply that surprises is the request's failure.
Response Api::answered_from(const Request& req, redis::Connection::Call call,
                            std::function<Response(const redisReply*)> answer) {
  Response r;
  r.commit = {std::move(call)};
  r.answer = [this, answer = std::move(answer),
              target = req.target](std::vector<redis::Reply> replies) {
    try {
      return answer(replies.at(0).get());
    } catch (...) {
      return failure(std::current_exception(), target);
    }
  };
  return r;
}

Response Api::read_job(const Request& req, Context& ctx, const std::string& svc,
                       const std::string& id, bool watch, const Answer& answer) {
  const std::string& model = cfg_.service_types.at(svc).model;
  if (watch && submits_ && !req.blocking) {
    return answered_from(
        req, redis::JobStore::get_watched_call(keys_, model, id, ctx.tenant, svc),
        [answer](const redisReply* reply) { return answer(redis::JobStore::record_of(reply)); });
  }
  return answer(step(ctx, [&](redis::JobStore& store, redis::Connection&) {
    if (watch) return store.get_watched(model, id, ctx.tenant, svc);
    return store.get(model, id);
  }));
}

JobEvent job_event(const JobRecord& job) {
  JobEvent e;
  e.job_id = job.id;
  e.terminal = is_terminal(job.status);
  e.name = job.status == JobStatus::processing && job.has_current_progress()
               ? "progress"
               : std::string(to_string(job.status));
  // What a client sees change: the status, which attempt holds it (a new take, a requeue, a
  // retry), progress reports, the cancel flag.
  const std::string state = std::string(to_string(job.status)) + "|" + job.holder + "|" +
                            std::to_string(job.attempts) + "|" + std::to_string(job.progress_seq) +
                            "|" + std::to_string(job.failures.size()) + "|" +
                            (job.cancel_requested ? "1" : "0");
  e.id = sha256_hex(state).substr(0, 16);
  return e;
}

// GET .../events: the first answer opens the stream (and asks for the job's changes short of
// its end to be announced); the server asks again after each change.
Response Api::job_events(const Request& req, Context& ctx, const std::string& svc,
                         const std::string& id, bool again) {
  auto answer = [tenant = ctx.tenant, svc, id](const std::optional<JobRecord>& rec) {
    if (!rec || rec->tenant != tenant || rec->service_type != svc)
      return error_response(404, "job_not_found", "no job " + id);
    Response r;
    r.body = job_json(*rec);
    r.event = job_event(*rec);
    return r;
  };
  return read_job(req, ctx, svc, id, !again, answer);
}

Response Api::get_result(const Request& req, Context& ctx, const std::string& svc,
                         const std::string& id) {
  auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
    return store.get(cfg_.service_types.at(svc).model, id);
  });
  if (!rec || rec->tenant != ctx.tenant || rec->service_type != svc)
    return error_response(404, "job_not_found", "no job " + id);
  if (rec->status != JobStatus::completed || rec->result_key.empty())
    return error_response(
        409, "no_result",
        "the job is " + std::string(to_string(rec->status)) + "; results exist for completed jobs");
  // A job's result never changes once it completed: its id tags it (strongly) for a client
  // resuming a download (If-Range) or holding a copy (If-None-Match).
  const std::string etag = "\"" + id + "\"";
  Response r;
  // As the model answered (jobs from before this was recorded: JSON, as then assumed).
  if (!rec->result_content_type.empty()) r.content_type = rec->result_content_type;
  r.headers.emplace_back("ETag", etag);
  r.headers.emplace_back("Accept-Ranges", "bytes");
  // A result is the model's bytes, shaped by whoever sent the input: served from the
  // gateway's origin (the dashboard's too), HTML or SVG among them must never run there. A
  // browser that opens one gets it sandboxed, with no script and no sniffed type.
  r.headers.emplace_back("Content-Security-Policy", "sandbox; default-src 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  if (none_match(req.header("if-none-match"), etag)) {
    r.status = 304;
    return r;
  }
  std::optional<ByteRangeSpec> range;
  if (if_range_holds(req.header("if-range"), etag)) range = parse_range(req.header("range"));
  std::string key;
  if (!rec->key_id.empty()) {
    auto k = enc_.keyring.get(rec->key_id);
    if (!k) {
      log::error("result key not loaded", {{"job_id", id}, {"key_id", rec->key_id}});
      return error_response(503, "key_unavailable",
                            "the key this result was encrypted with is not loaded");
    }
    key = *k;
  }
  try {
    if (range) return with_result_range(std::move(r), *rec, key, *range);
    // (A dropped storage connection mid-way resumes where it stopped: ResumingSource.)
    r.stream = std::make_unique<storage::ResumingSource>(
        storage_, rec->result_key, std::stop_token{}, 0, std::nullopt, kDownloadPersistence);
    if (!rec->key_id.empty()) {
      // Its length, from the ciphertext's: a client sees how much is coming.
      std::optional<std::uint64_t> size;
      if (auto stored = r.stream->size()) size = result_plaintext_size(*stored, enc_.params);
      auto dec = std::make_unique<crypto::DecryptingSource>(*r.stream, key, crypto::result_aad(id),
                                                            enc_.params);
      auto primed = std::make_unique<crypto::PrimedSource>(*dec, size);  // fails here, before
                                                                         // any byte is sent
      r.stream =
          std::make_unique<OwningChain>(std::move(r.stream), std::move(dec), std::move(primed));
    }
  } catch (const crypto::DecryptionError& e) {
    log::error("stored result does not decrypt", {{"job_id", id}, {"error", e.what()}});
    return error_response(500, "decryption_failed",
                          "the stored result does not decrypt with its key");
  } catch (const storage::StorageError& e) {
    if (e.kind() == storage::ErrorKind::not_found)
      return error_response(404, "result_not_found", "the result is no longer stored");
    log::error("cannot read a result", {{"job_id", id}, {"error", e.what()}});
    return error_response(503, "storage_unavailable", "the result could not be read; retry later");
  }
  return r;
}

// A byte range of a result (a download resumed): 206 with the bytes and where they lie, 416 when
// the range starts past the end. Of an encrypted result, only the segments holding the range are
// read and decrypted (the header apart), each verified as a whole download's would be. Throws
// as get_result's storage and decryption steps do.
Response Api::with_result_range(Response r, const JobRecord& rec, const std::string& key,
                                const ByteRangeSpec& range) {
  const std::uint64_t stored = storage_.size_of(rec.result_key, {});
  const std::uint64_t size = key.empty() ? stored : result_plaintext_size(stored, enc_.params);
  if (size == 0) {  // no byte to name: the whole (empty) result, as if no range was asked
    r.stream = std::make_unique<MemorySource>("");
    return r;
  }
  const auto span = resolve_range(range, size);
  if (!span) {
    Response e = error_response(416, "range_not_satisfiable",
                                "the result is " + std::to_string(size) + " bytes");
    e.headers.emplace_back("Content-Range", "bytes */" + std::to_string(size));
    return e;
  }
  if (key.empty()) {
    r.stream =
        std::make_unique<storage::ResumingSource>(storage_, rec.result_key, std::stop_token{},
                                                  span->first, span->length, kDownloadPersistence);
  } else {
    const auto reading = crypto::range_reading(span->first, span->length, stored, enc_.params);
    std::string header(crypto::header_size(enc_.params), '\0');
    {
      auto head = storage_.open_range(rec.result_key, 0, header.size(), {});
      size_t got = 0;
      while (got < header.size())
        if (size_t n = head->read(std::span<char>(header.data() + got, header.size() - got)))
          got += n;
        else
          throw crypto::DecryptionError("the stored result is shorter than its header");
    }
    auto ciphertext = std::make_unique<storage::ResumingSource>(
        storage_, rec.result_key, std::stop_token{}, reading.ciphertext_first,
        reading.ciphertext_length, kDownloadPersistence);
    auto dec = std::make_unique<crypto::DecryptingSource>(
        *ciphertext, key, crypto::result_aad(rec.id), enc_.params,
        crypto::Resume{std::move(header), reading.segment, stored});
    auto slice = std::make_unique<SliceSource>(*dec, reading.skip, span->length);
    auto primed = std::make_unique<crypto::PrimedSource>(*slice, span->length);
    r.stream = std::make_unique<OwningChain>(std::move(ciphertext), std::move(dec),
                                             std::move(slice), std::move(primed));
  }
  r.status = 206;
  r.headers.emplace_back("Content-Range", "bytes " + std::to_string(span->first) + "-" +
                                              std::to_string(span->first + span->length - 1) + "/" +
                                              std::to_string(size));
  return r;
}

Response Api::cancel(const Request& req, Context& ctx, const std::string& svc,
                     const std::string& id) {
  const std::string& model = cfg_.service_types.at(svc).model;
  auto get = [&](redis::JobStore& store, redis::Connection&) { return store.get(model, id); };
  {
    auto rec = step(ctx, get);  // (a read: what a pause of writes does not hold)
    if (!rec || rec->tenant != ctx.tenant || rec->service_type != svc)
      return error_response(404, "job_not_found", "no job " + id);
  }
  // The answer from the step's outcome and the record as it left it. maybe_ran: an earlier
  // attempt (a retry, a group commit that failed) may have run the step.
  using redis::CancelOutcome;
  auto answer = [id](CancelOutcome outcome, bool maybe_ran, const std::optional<JobRecord>& rec) {
    if (outcome == CancelOutcome::missing)
      return error_response(404, "job_not_found", "no job " + id);
    // A cancel done again that finds the job cancelled: the first attempt ran, its reply lost.
    if (outcome == CancelOutcome::terminal && maybe_ran && rec &&
        rec->status == JobStatus::cancelled)
      outcome = CancelOutcome::cancelled;
    if (outcome == CancelOutcome::terminal)
      return error_response(
          409, "job_finished",
          "the job is already " + std::string(rec ? to_string(rec->status) : "finished"));
    Response r;
    r.status = outcome == CancelOutcome::cancelled ? 200 : 202;  // 202: the relay is stopping it
    r.body = rec ? job_json(*rec) : "{}";
    log::info(outcome == CancelOutcome::cancelled ? "job cancelled" : "job cancellation requested",
              {{"job_id", id}});
    return r;
  };
  // The step (which returns the record as it left it) goes with other requests' steps while no
  // thread waits (with Redis pausing writes, each cancel held a request thread).
  if (submits_ && !req.blocking) {
    return answered_from(req, redis::JobStore::cancel_call(keys_, model, svc, id),
                         [answer](const redisReply* reply) {
                           auto c = redis::JobStore::cancelled(reply);
                           return answer(c.outcome, false, c.record);
                         });
  }
  bool retried = req.blocking;
  auto c = step(
      ctx,
      [&](redis::JobStore& store, redis::Connection&) { return store.cancel_job(model, svc, id); },
      [&](int) { retried = true; });
  return answer(c.outcome, retried, c.record);
}

Response Api::ready() {
  json::object checks;
  bool ok = true;
  auto conn = probe_redis_.borrow();
  try {
    redis::JobStore(conn->get(), keys_).ping();
    checks["redis"] = "ok";
  } catch (const std::exception& e) {
    conn->reset();
    // /readyz is unauthenticated: the cause (addresses, paths) goes to the log, not the answer.
    log::warn("not ready: redis", {{"error", e.what()}});
    checks["redis"] = "unavailable";
    ok = false;
  }
  try {
    storage_.check();
    checks["storage"] = "ok";
  } catch (const std::exception& e) {
    log::warn("not ready: storage", {{"error", e.what()}});
    checks["storage"] = "unavailable";
    ok = false;
  }
  Response r;
  r.status = ok ? 200 : 503;
  if (!ok) r.headers.emplace_back("Retry-After", "2");
  r.body =
      json::serialize(json::object{{"status", ok ? "ready" : "not ready"}, {"checks", checks}});
  return r;
}

Response Api::metrics_text() {
  auto& m = metrics();
  PrometheusWriter w;
  w.counter("relay_http_requests_total", "HTTP requests by route and status.", {"route", "status"},
            m.requests.snapshot());
  w.histogram("relay_http_request_duration_seconds", "HTTP request latency by route.", {"route"},
              m.request_seconds);
  w.counter("relay_jobs_submitted_total", "Jobs submitted, by service type.", {"service_type"},
            m.jobs_submitted.snapshot());
  w.counter("relay_jobs_finished_total", "Jobs that reached a terminal state, by model and status.",
            {"model", "status"}, m.jobs_finished.snapshot());
  w.counter("relay_jobs_reaped_total", "Jobs requeued by the reaper after their relay died.",
            m.reaped.value());
  w.counter("relay_jobs_deadlettered_total", "Jobs dead-lettered after repeated relay crashes.",
            m.deadlettered.value());
  w.counter("relay_quota_refusals_total",
            "Submissions refused (429) by a tenant quota, by tenant and limit (max_pending, "
            "submit_rate).",
            {"tenant", "limit"}, m.quota_refusals.snapshot());
  w.counter("relay_jobs_expired_total",
            "Jobs whose ttl passed while they waited in pending, by model.", {"model"},
            m.expired.snapshot());
  w.histogram("relay_job_stage_duration_seconds",
              "Time jobs spent in each stage the relay measures (queue_wait, download, decrypt, "
              "inference, upload, total), by model.",
              {"model", "stage"}, m.job_stage_seconds);
  w.histogram("relay_job_end_to_end_seconds",
              "Submission to terminal state of jobs a relay finished, by model and status.",
              {"model", "status"}, m.job_end_to_end_seconds);
  w.histogram("relay_webhook_delivery_duration_seconds",
              "Duration of webhook delivery attempts, by outcome.", {"outcome"}, m.webhook_seconds);
  w.counter("relay_webhook_attempts_total", "Webhook delivery attempts by outcome.", {"outcome"},
            m.webhook_attempts.snapshot());
  w.counter("relay_webhook_deferrals_total",
            "Webhook deliveries put back for a moment: their receiver had its share "
            "(webhooks.per_host_concurrency, grown up to per_host_max_concurrency while it keeps "
            "up) in flight and as many waiting.",
            m.webhook_deferrals.value());
  w.counter("relay_webhooks_given_up_total",
            "Webhook deliveries given up for good, by reason: refused (the URL may not be "
            "called), gone (the receiver answered 410), expired (webhooks.max_age passed).",
            {"reason"}, m.webhooks_given_up.snapshot());
  // Queue gauges, read now.
  std::map<std::vector<std::string>, double> depth, oldest;
  // Whether this scrape could read Redis: without it the queue gauges are missing, and an alert
  // on them would go quiet exactly when Redis is away.
  double redis_up = 1;
  auto conn = probe_redis_.borrow();
  try {
    redis::JobStore store(conn->get(), keys_);
    for (const auto& model : cfg_.models()) {
      auto q = store.queue_depth(model);
      depth[{model, "pending"}] = static_cast<double>(q.pending);
      depth[{model, "processing"}] = static_cast<double>(q.processing);
      depth[{model, "deadletter"}] = static_cast<double>(q.deadletter);
      depth[{model, "held"}] = static_cast<double>(q.held);
      depth[{model, "retrying"}] = static_cast<double>(q.retrying);
      oldest[{model}] = q.oldest_wait_seconds(wall_now());
    }
  } catch (const redis::IoError&) {
    conn->reset();
    redis_up = 0;
  } catch (const redis::ReplyError&) {  // refused (auth, a busy script): the connection is fine
    redis_up = 0;
  }
  std::map<std::vector<std::string>, std::uint64_t> refusals;
  for (const auto& [reason, n] : redis::refusal_counts()) refusals[{reason}] = n;
  w.counter("relay_redis_refusals_total",
            "Commands Redis refused for a passing state, each retried, by reason: the error "
            "code in lower case (oom: maxmemory reached; misconf: a failed snapshot stops "
            "writes; loading, busy, readonly, masterdown: a restart, a slow script, a "
            "failover...) or maxclients.",
            {"reason"}, refusals);
  w.gauge("relay_redis_up",
          "1 if this scrape read the queues from Redis, 0 if Redis could not be reached.", {},
          {{{}, redis_up}});
  w.gauge("relay_queue_depth",
          "Jobs per model and queue (pending, processing, deadletter, held: a paused model's, "
          "retrying).",
          {"model", "queue"}, depth);
  w.gauge("relay_queue_oldest_age_seconds", "Age of the oldest pending job per model.", {"model"},
          oldest);
  const auto memory = process_memory();
  w.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
          {{{}, memory.resident_bytes}});
  w.gauge("relay_gateway_heap_in_use_bytes",
          "Bytes of the gateway's heap in use (malloc's count: what it holds, without what "
          "malloc keeps freed).",
          {}, {{{}, memory.heap_in_use_bytes}});
  Response r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = w.text();
  return r;
}

}  // namespace relay::gateway
