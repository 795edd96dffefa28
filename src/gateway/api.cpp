#include "gateway/api.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/sha.h>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>

#include "common/errors.hpp"
#include "common/hex.hpp"
#include "common/log.hpp"
#include "common/time.hpp"
#include "common/utf8.hpp"
#include "crypto/primed_source.hpp"
#include "gateway/metrics.hpp"
#include "gateway/multipart.hpp"
#include "gateway/openapi.hpp"
#include "redis/job_store.hpp"
#include "redis/retry.hpp"

namespace relay::gateway {
namespace {

namespace json = boost::json;

// One Redis connection per blocking-pool thread.
redis::LazyConnection& thread_redis(const redis::Endpoint& ep) {
  thread_local std::optional<redis::LazyConnection> conn;
  if (!conn) conn.emplace(ep);
  return *conn;
}

std::string sha256_hex(std::string_view s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return to_hex(d, sizeof d);
}

// Thrown by the upload path when the body outgrows its limit.
struct TooLarge {};

// Counts the bytes of an upload and stops it at the limit.
class LimitedSource final : public ByteSource {
 public:
  LimitedSource(ByteSource& inner, std::uint64_t limit) : inner_(inner), limit_(limit) {}
  size_t read(std::span<char> buf) override {
    size_t n = inner_.read(buf);
    count_ += n;
    if (count_ > limit_) throw TooLarge{};
    return n;
  }
  std::uint64_t count() const { return count_; }
  std::optional<std::uint64_t> size() const override { return inner_.size(); }

 private:
  ByteSource& inner_;
  std::uint64_t limit_, count_ = 0;
};

// Calls renew() every `every` while bytes keep arriving: an Idempotency-Key reservation lives as
// long as its upload makes progress, no longer (a crashed gateway's key frees itself).
class RenewingSource final : public ByteSource {
 public:
  RenewingSource(ByteSource& inner, std::chrono::milliseconds every, std::function<void()> renew)
      : inner_(inner), every_(every), renew_(std::move(renew)) {}
  size_t read(std::span<char> buf) override {
    size_t n = inner_.read(buf);
    if (n > 0 && std::chrono::steady_clock::now() - last_ >= every_) {
      renew_();
      last_ = std::chrono::steady_clock::now();
    }
    return n;
  }
  std::optional<std::uint64_t> size() const override { return inner_.size(); }

 private:
  ByteSource& inner_;
  std::chrono::milliseconds every_;
  std::function<void()> renew_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Drains what is left of a request body so that the connection can be reused.
void drain(ByteSource* body) {
  if (!body) return;
  char sink[16384];
  while (body->read(std::span<char>(sink, sizeof sink)) > 0) {
  }
}

struct Submission {
  std::string operation, callback_url, params, filename, content_type;
};

}  // namespace

struct Api::Context {
  redis::LazyConnection& conn;
  std::string tenant;
};

// Runs one Redis step for a request through redis::with_retry (a restarting, loading or
// failing-over Redis is waited for up to redis.retry_timeout; then the request gets 503).
// The JobStore is made per attempt: a retry may replace the connection under it.
template <typename F>
auto Api::step(Context& ctx, F&& f, const std::function<void(int)>& on_retry) {
  return redis::with_retry(
      ctx.conn, cfg_.redis_retry_timeout, {},
      [&](redis::Connection& c) {
        redis::JobStore store(c, keys_);
        return f(store, c);
      },
      on_retry);
}

Response error_response(unsigned status, const std::string& code, const std::string& message) {
  Response r;
  r.status = status;
  r.body =
      json::serialize(json::object{{"error", json::object{{"code", code}, {"message", message}}}});
  // Every 503 says when to come back (README, API): a passing state on the server's side.
  if (status == 503) r.headers.emplace_back("Retry-After", "2");
  return r;
}

namespace {
void set_retry_after(Response& r, const std::string& seconds) {
  for (auto& [k, v] : r.headers)
    if (k == "Retry-After") v = seconds;
}
}  // namespace

Api::Api(const Config& config, storage::Storage& storage, const crypto::Encryption& encryption)
    : cfg_(config),
      storage_(storage),
      enc_(encryption),
      endpoint_(config.redis.endpoint()),
      keys_(config.redis.keys()) {}

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
  auto it = cfg_.api_keys.find(sha256_hex(key));
  if (it == cfg_.api_keys.end()) return std::nullopt;
  return it->second;
}

std::optional<Response> Api::answer_at_once(const Request& req) {
  if (req.method != "GET" || req.body) return std::nullopt;
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

Response Api::handle(const Request& req, bool deadline_passed) {
  auto& conn = thread_redis(endpoint_);
  Context ctx{conn, {}};
  try {
    return route(req, ctx, deadline_passed);
  } catch (const redis::IoError& e) {
    conn.reset();
    log::warn("redis unavailable", {{"error", e.what()}});
    auto r = error_response(503, "redis_unavailable", "the job store is unavailable; retry later");
    set_retry_after(r, "1");
    r.close = req.body != nullptr;
    return r;
  } catch (const redis::ReplyError& e) {
    // Redis refused a step for a reason that is not passing (out of memory, a misconfigured
    // ACL, a bug): a server-side failure, never the client's 4xx.
    log::error("redis error", {{"error", e.what()}});
    auto r = error_response(503, "redis_error", "the job store refused the request; retry later");
    set_retry_after(r, "5");
    r.close = req.body != nullptr;
    return r;
  } catch (const storage::StorageError& e) {
    log::error("storage unavailable", {{"error", e.what()}});
    auto r = error_response(503, "storage_unavailable", "storage is unavailable; retry later");
    r.close = req.body != nullptr;
    return r;
  } catch (const std::exception& e) {
    // The body could not be read (the client went away, or sent broken HTTP framing): nothing
    // was kept (the submit path removes what it stored); answer if anyone still listens.
    log::warn("request failed", {{"error", e.what()}, {"target", req.target.substr(0, 200)}});
    auto r = error_response(400, "bad_request", e.what());
    r.close = true;
    return r;
  }
}

Response Api::route(const Request& req, Context& ctx, bool deadline_passed) {
  auto target = boost::urls::parse_origin_form(req.target);
  if (!target) return error_response(400, "bad_request", "malformed request target");
  std::vector<std::string> seg;
  for (auto s : target->segments()) seg.push_back(std::string(s));
  const std::string& m = req.method;
  auto with_route = [](Response r, const char* route) {
    r.route = route;
    return r;
  };

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
  if (seg.empty() || seg[0] != "jobs" || seg.size() < 2 || seg.size() > 4)
    return error_response(404, "not_found", "no such route");

  // Everything under /jobs needs a tenant.
  auto tenant = tenant_of(req);
  if (!tenant) {
    auto r = error_response(401, "unauthorized",
                            "a valid API key is required (Authorization: Bearer <key>)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    r.close = req.body != nullptr;
    return r;
  }
  ctx.tenant = *tenant;
  const std::string& svc = seg[1];
  if (!cfg_.service_types.count(svc)) {
    auto r = error_response(404, "unknown_service_type", "no service type '" + svc + "'");
    r.close = req.body != nullptr;
    return r;
  }
  if (seg.size() == 2) {
    if (m == "POST") return with_route(submit(req, ctx, svc), "POST /jobs/{service_type}");
    return error_response(405, "method_not_allowed", "use POST to submit a job");
  }
  const std::string& id = seg[2];
  if (!is_valid_job_id(id))
    return error_response(400, "invalid_id", "job ids are UUIDs (v4, lowercase)");
  drain(req.body);  // no other route takes a body
  if (seg.size() == 3) {
    if (m == "GET")
      return with_route(get_job(req, ctx, svc, id, deadline_passed),
                        "GET /jobs/{service_type}/{id}");
    if (m == "DELETE") return with_route(cancel(ctx, svc, id), "DELETE /jobs/{service_type}/{id}");
    return error_response(405, "method_not_allowed", "use GET or DELETE");
  }
  if (seg[3] == "result" && m == "GET")
    return with_route(get_result(ctx, svc, id), "GET /jobs/{service_type}/{id}/result");
  return error_response(404, "not_found", "no such route");
}

Response Api::submit(const Request& req, Context& ctx, const std::string& svc) {
  const ServiceType& st = cfg_.service_types.at(svc);
  const std::uint64_t limit = static_cast<std::uint64_t>(
      st.max_input_size > 0 ? std::min(st.max_input_size, cfg_.max_body_size) : cfg_.max_body_size);
  auto refuse = [&](unsigned status, const std::string& code, const std::string& message) {
    auto r = error_response(status, code, message);
    r.close = true;  // the body was not read: the connection cannot be reused
    return r;
  };
  if (!req.body) return refuse(400, "missing_input", "the request has no body");
  if (req.content_length && *req.content_length > limit)
    return refuse(413, "too_large", "the input is larger than " + std::to_string(limit) + " bytes");

  const std::string content_type = req.header("content-type");
  const bool multipart =
      content_type.size() >= 10 && (content_type.compare(0, 10, "multipart/") == 0 ||
                                    content_type.compare(0, 10, "Multipart/") == 0);
  std::optional<std::string> boundary;
  if (multipart) {
    boundary = multipart_boundary(content_type);
    if (!boundary)
      return refuse(415, "unsupported_media_type",
                    "multipart bodies must be multipart/form-data with a boundary");
  }

  // Options: query parameters for a raw body, form fields for multipart (checked after the upload).
  Submission sub;
  auto target = boost::urls::parse_origin_form(req.target);
  for (auto p : target->params()) {
    std::string k(p.key), v(p.value);
    if (k == "operation")
      sub.operation = v;
    else if (k == "callback_url")
      sub.callback_url = v;
    else if (k == "params")
      sub.params = v;
    else if (k == "filename")
      sub.filename = v;
  }
  auto validate = [&]() -> std::optional<Response> {
    if (!sub.operation.empty() && !st.operations.empty() &&
        std::find(st.operations.begin(), st.operations.end(), sub.operation) == st.operations.end())
      return error_response(400, "invalid_operation",
                            "operation '" + sub.operation + "' is not offered by '" + svc + "'");
    if (sub.operation.size() > 128)
      return error_response(400, "invalid_operation", "operation is too long");
    if (!sub.params.empty()) {
      boost::system::error_code ec;
      auto v = json::parse(sub.params, ec);
      if (ec || !v.is_object())
        return error_response(400, "invalid_params", "params must be a JSON object");
    }
    if (!sub.callback_url.empty()) {
      if (cfg_.webhook_secret.empty())
        return error_response(400, "webhooks_not_configured",
                              "this gateway has no webhooks.secret: callbacks cannot be signed");
      if (sub.callback_url.size() > 2048)
        return error_response(400, "invalid_callback_url", "callback_url is too long");
      if (auto why = check_callback_url(sub.callback_url, cfg_.webhook_allow_private))
        return error_response(400, "invalid_callback_url", *why);
    }
    return std::nullopt;
  };
  if (!multipart) {
    if (auto bad = validate()) {
      bad->close = true;
      return std::move(*bad);
    }
  }

  // Idempotency-Key: reserve it for a new id before storing anything; a retry finds the first job.
  const std::string job_id = new_job_id();
  std::string idem_key;
  if (std::string k = req.header("idempotency-key"); !k.empty()) {
    if (k.size() > 256)
      return refuse(400, "invalid_idempotency_key",
                    "Idempotency-Key is longer than 256 characters");
    idem_key = keys_.idempotency(st.model, ctx.tenant, sha256_hex(k));
    auto existing = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
      // Reserved for as long as an upload may stall; renewed while it progresses, given the
      // job's retention once the job exists.
      return store.reserve_idempotency(idem_key, job_id, cfg_.idempotency_reservation);
    });
    if (existing && *existing != job_id) {
      drain(req.body);
      if (!existing->empty()) {
        auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
          return store.get(st.model, *existing);
        });
        if (rec && rec->tenant == ctx.tenant) {
          Response r;
          r.status = 202;
          r.body = job_json(*rec);
          r.headers.emplace_back("Location", "/jobs/" + rec->service_type + "/" + rec->id);
          r.headers.emplace_back("Idempotent-Replayed", "true");
          return r;
        }
      }
      return error_response(409, "idempotency_in_progress",
                            "a request with this Idempotency-Key is still being processed");
    }
  }
  auto release_idem = [&] {
    if (!idem_key.empty()) {
      try {
        redis::JobStore(ctx.conn.get(), keys_).release_idempotency(idem_key);
      } catch (...) {
      }
    }
  };

  RenewingSource renewing(*req.body, cfg_.idempotency_reservation / 3, [&] {
    if (!idem_key.empty())
      redis::JobStore(ctx.conn.get(), keys_)
          .renew_idempotency(idem_key, job_id, cfg_.idempotency_reservation);
  });
  ByteSource& body = renewing;
  const std::string input_key = input_object_key(svc, job_id);
  // Inputs are encrypted as they stream to storage, bound to this job ("<id>/input").
  auto store_input = [&](ByteSource& plain) {
    if (!enc_.enabled) return storage_.put(input_key, plain, {});
    crypto::EncryptingSource sealed(plain, *enc_.keyring.get(enc_.active_id),
                                    crypto::input_aad(job_id), enc_.params);
    storage_.put(input_key, sealed, {});
  };
  std::uint64_t size = 0;
  bool stored = false;
  auto forget_input = [&] {
    if (!stored) return;
    try {
      storage_.remove(input_key);
    } catch (const std::exception& e) {
      log::warn("cannot delete the input of a refused submission",
                {{"key", input_key}, {"error", e.what()}});
    }
  };
  // Any way out but success removes what this request stored and frees its Idempotency-Key.
  struct Undo {
    std::function<void()> f;
    ~Undo() {
      if (!f) return;
      try {
        f();
      } catch (...) {  // best effort, and never from a destructor
      }
    }
  } undo{[&] {
    forget_input();
    release_idem();
  }};
  try {
    if (multipart) {
      MultipartReader reader(body, *boundary);
      PartInfo part;
      bool have_file = false;
      while (reader.next(part)) {
        if (part.name == "file") {
          if (have_file) throw MultipartError("more than one file part");
          PartSource source(reader);
          LimitedSource limited(source, limit);
          store_input(limited);
          stored = true;
          have_file = true;
          size = limited.count();
          sub.filename = part.filename;
          sub.content_type = part.content_type;
        } else if (part.name == "operation")
          sub.operation = reader.read_all(256);
        else if (part.name == "callback_url")
          sub.callback_url = reader.read_all(4096);
        else if (part.name == "params")
          sub.params = reader.read_all(64 * 1024);
        else
          reader.read_all(64 * 1024);  // unknown fields are ignored
      }
      drain(&body);  // the epilogue
      if (!have_file)
        return error_response(400, "missing_input", "the multipart body has no 'file' part");
      if (auto bad = validate()) return std::move(*bad);
    } else {
      LimitedSource limited(body, limit);
      store_input(limited);
      stored = true;
      size = limited.count();
      sub.content_type = content_type;
    }
  } catch (const TooLarge&) {
    return refuse(413, "too_large", "the input is larger than " + std::to_string(limit) + " bytes");
  } catch (const MultipartError& e) {
    return refuse(400, "malformed_multipart", e.what());
  } catch (const storage::StorageError& e) {
    log::error("cannot store an input", {{"job_id", job_id}, {"error", e.what()}});
    auto r =
        error_response(503, "storage_unavailable", "the input could not be stored; retry later");
    r.close = true;
    return r;
  }
  // Otherwise (the client went away, broken HTTP framing) the exception goes on; undo runs.

  JobRecord r;
  r.id = job_id;
  r.service_type = svc;
  r.model = st.model;
  r.operation = sub.operation;
  r.status = "pending";
  r.tenant = ctx.tenant;
  r.input_key = input_key;
  // Shown in job JSON: valid UTF-8, cut on a character boundary.
  r.input_filename = sub.filename.empty() ? "input" : utf8_clean(sub.filename, 255);
  r.input_content_type =
      sub.content_type.empty() ? "application/octet-stream" : utf8_clean(sub.content_type, 255);
  r.input_size = std::to_string(size);
  r.params = sub.params;
  r.callback_url = sub.callback_url;
  const bool priority = !cfg_.priority_header.empty() && !req.header(cfg_.priority_header).empty();
  r.priority = priority ? "1" : "";
  r.attempts = "0";
  r.key_id = enc_.enabled ? enc_.active_id : "";
  r.created_at = format_rfc3339(wall_now());
  {
    // An attempt that fails after Redis received it may have run: a retry that then finds the
    // id taken is that attempt's success (ids are random 128-bit: nobody else has this one).
    bool retried = false;
    bool created = step(
        ctx,
        [&](redis::JobStore& store, redis::Connection&) {
          bool ok = store.submit(r, priority);
          // Not acknowledged before replicas have it: a failover must not drop it. Too few
          // acks is an unknown outcome, retried (on the new master once the sentinels say so).
          store.require_replicas(cfg_.redis.wait_replicas);
          return ok;
        },
        [&](int) { retried = true; });
    if (!created && !retried) throw std::runtime_error("job id collision");
    if (!idem_key.empty())
      step(ctx, [&](redis::JobStore& store, redis::Connection&) {
        return store.renew_idempotency(idem_key, job_id, cfg_.job_retention);
      });
  }
  undo.f = nullptr;  // the job exists: keep its input and key
  metrics().jobs_submitted.add({svc});
  log::info("job submitted", {{"job_id", job_id},
                              {"service_type", svc},
                              {"model", st.model},
                              {"size", size},
                              {"priority", priority},
                              {"tenant", ctx.tenant}});
  Response resp;
  resp.status = 202;
  resp.body = job_json(r);
  resp.headers.emplace_back("Location", "/jobs/" + svc + "/" + job_id);
  return resp;
}

Response Api::get_job(const Request& req, Context& ctx, const std::string& svc,
                      const std::string& id, bool deadline_passed) {
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
  auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
    return store.get(cfg_.service_types.at(svc).model, id);
  });
  if (!rec || rec->tenant != ctx.tenant || rec->service_type != svc)
    return error_response(404, "job_not_found", "no job " + id);
  Response r;
  r.body = job_json(*rec);
  auto st = rec->parsed_status();
  if (wait.count() > 0 && !deadline_passed && st && !is_terminal(*st)) {
    r.wait_job = id;
    r.wait_until = std::chrono::steady_clock::now() + wait;
  }
  return r;
}

Response Api::get_result(Context& ctx, const std::string& svc, const std::string& id) {
  auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
    return store.get(cfg_.service_types.at(svc).model, id);
  });
  if (!rec || rec->tenant != ctx.tenant || rec->service_type != svc)
    return error_response(404, "job_not_found", "no job " + id);
  if (rec->status != "completed" || rec->result_key.empty())
    return error_response(409, "no_result",
                          "the job is " + rec->status + "; results exist for completed jobs");
  Response r;
  try {
    r.stream = storage_.open(rec->result_key, {});
    // As the model answered (jobs from before this was recorded: JSON, as then assumed).
    if (!rec->result_content_type.empty()) r.content_type = rec->result_content_type;
    if (!rec->key_id.empty()) {
      auto key = enc_.keyring.get(rec->key_id);
      if (!key) {
        log::error("result key not loaded", {{"job_id", id}, {"key_id", rec->key_id}});
        return error_response(503, "key_unavailable",
                              "the key this result was encrypted with is not loaded");
      }
      auto dec = std::make_unique<crypto::DecryptingSource>(*r.stream, *key, crypto::result_aad(id),
                                                            enc_.params);
      auto primed = std::make_unique<crypto::PrimedSource>(
          *dec, std::nullopt);  // fails here, before any byte is sent
      r.stream = std::make_unique<crypto::OwningChain>(std::move(r.stream), std::move(dec),
                                                       std::move(primed));
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

Response Api::cancel(Context& ctx, const std::string& svc, const std::string& id) {
  const std::string& model = cfg_.service_types.at(svc).model;
  auto get = [&](redis::JobStore& store, redis::Connection&) { return store.get(model, id); };
  auto rec = step(ctx, get);
  if (!rec || rec->tenant != ctx.tenant || rec->service_type != svc)
    return error_response(404, "job_not_found", "no job " + id);
  bool retried = false;
  std::string outcome = step(
      ctx, [&](redis::JobStore& store, redis::Connection&) { return store.cancel(model, id); },
      [&](int) { retried = true; });
  if (outcome == "missing") return error_response(404, "job_not_found", "no job " + id);
  rec = step(ctx, get);
  // A retried cancel that finds the job cancelled: the first attempt ran, its reply was lost.
  if (outcome == "terminal" && retried && rec && rec->status == "cancelled") outcome = "cancelled";
  if (outcome == "terminal")
    return error_response(409, "job_finished",
                          "the job is already " + (rec ? rec->status : std::string("finished")));
  Response r;
  r.status = outcome == "cancelled" ? 200 : 202;  // 202: the relay is stopping it
  r.body = rec ? job_json(*rec) : "{}";
  log::info(outcome == "cancelled" ? "job cancelled" : "job cancellation requested",
            {{"job_id", id}});
  return r;
}

Response Api::ready() {
  json::object checks;
  bool ok = true;
  try {
    redis::JobStore(thread_redis(endpoint_).get(), keys_).ping();
    checks["redis"] = "ok";
  } catch (const std::exception& e) {
    thread_redis(endpoint_).reset();
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
  w.counter("relay_webhook_attempts_total", "Webhook delivery attempts by outcome.", {"outcome"},
            m.webhook_attempts.snapshot());
  // Queue gauges, read now.
  std::map<std::vector<std::string>, double> depth, oldest;
  try {
    redis::JobStore store(thread_redis(endpoint_).get(), keys_);
    for (const auto& model : cfg_.models()) {
      auto q = store.queue_depth(model);
      depth[{model, "pending"}] = static_cast<double>(q.pending);
      depth[{model, "processing"}] = static_cast<double>(q.processing);
      depth[{model, "deadletter"}] = static_cast<double>(q.deadletter);
      double age = 0;
      if (q.oldest_pending) {
        if (auto rec = store.get(model, *q.oldest_pending))
          if (auto created = parse_rfc3339(rec->created_at))
            age = std::chrono::duration<double>(wall_now() - *created).count();
      }
      oldest[{model}] = age;
    }
  } catch (const redis::IoError&) {
    thread_redis(endpoint_).reset();
  }
  w.gauge("relay_queue_depth", "Jobs per model and queue (pending, processing, deadletter).",
          {"model", "queue"}, depth);
  w.gauge("relay_queue_oldest_age_seconds", "Age of the oldest pending job per model.", {"model"},
          oldest);
  Response r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = w.text();
  return r;
}

}  // namespace relay::gateway
