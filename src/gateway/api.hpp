#pragma once
// The gateway's HTTP API as request -> response (SPEC §2), free of sockets: the server
// (http_server.cpp) parses HTTP and runs handle() on its blocking pool, because handlers call
// Redis and storage synchronously. Two answers hand work back to the server: a submission whose
// body is still arriving returns an Intake (submit.cpp) that the server feeds as bytes come in,
// and a long-poll returns a "wait": the server waits for the job's completion notice
// asynchronously, then asks again.

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "crypto/keyring.hpp"
#include "gateway/api_keys.hpp"
#include "gateway/byte_range.hpp"
#include "gateway/config.hpp"
#include "gateway/cors.hpp"
#include "gateway/job_json.hpp"
#include "gateway/submission.hpp"
#include "gateway/unsettled.hpp"
#include "http/resolver.hpp"
#include "redis/batcher.hpp"
#include "redis/connection_pool.hpp"
#include "redis/job_record.hpp"
#include "storage/storage.hpp"

namespace relay::gateway {

struct Request {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // path and query, as received
  std::function<std::string(std::string_view name)> header;  // "" when absent
  std::optional<std::uint64_t> content_length;
  bool has_body = false;      // a body follows the header
  std::string body;           // what of it the server received before asking (a small body: all)
  bool body_complete = true;  // `body` is the whole body
  // Not from the client: the server's read of the job a submission waits on (Prefer: wait),
  // made as a GET of the job's path, answered as the submission is: 200 once the job ended,
  // 202 while it has not (the server adds the submission's headers).
  bool after_submit = false;
  // Not from the client: asked again because the group commit carrying its step failed
  // (Response::answer); the step runs on this thread, with its retries — for what is left of
  // redis.retry_timeout since the step went to the group commit (`since`).
  bool blocking = false;
  std::chrono::steady_clock::time_point since{};
};

struct Response;

// A request whose body is taken as it arrives (a submission). The server reads the body on its
// I/O thread and pushes each piece in, in order, then asks for the answer; both calls block on
// storage and Redis, so they run on the server's storage pool, only ever for bytes already
// received. Destroyed before finish() succeeded — the client went away or was cut, a refusal,
// shutdown — it removes what it stored and frees its Idempotency-Key.
class Intake {
 public:
  virtual ~Intake() = default;
  // A refusal (413, malformed multipart, storage unavailable) ends the request: the server
  // sends it and closes the connection.
  virtual std::optional<Response> write(std::string_view bytes) = 0;
  // The whole body was pushed: the answer (202 and the job, or a refusal) — or a Response with
  // `commit` set: the job's record, to go to Redis with other requests' (group commit) while no
  // thread waits for it. The server sends it, then asks for the answer: committed() with the
  // replies (cheap: it runs on the I/O thread), or commit_again() (blocking) when the batch
  // failed — the step again, with its retries; a first attempt that ran is found by the job's
  // id — or when committed() had no answer on its own (nullopt: the Idempotency-Key names
  // another job, whose record is the answer).
  virtual Response finish() = 0;
  virtual std::optional<Response> committed(std::vector<redis::Reply> replies) = 0;
  // (since: when the failed batch took the step; its retries count from then. Default: now.)
  // lost: the batch's connection broke (or Redis stayed silent) after the step was sent: it may
  // have run.
  virtual Response commit_again(std::chrono::steady_clock::time_point since, bool lost) = 0;
  // Gates: what a submission passes before its body is taken, each a step in Redis — its
  // Idempotency-Key reserved (a body still to come), then its tenant's quota admission. Api::
  // submit answers with the intake and the first gate's calls as `commit`, `gate` set. The
  // server sends them with other requests' (no thread waits for them) and hands the replies
  // to gated() (cheap: the I/O thread), which answers nullopt — the body may come, the bytes
  // read with the header first —, the next gate (`gate` set, its calls in `commit`; none: the
  // rest must block, gate_again()), or the answer: a refusal (429), a replay. When a batch
  // failed, gate_again() (blocking) passes the gates left, each step with its retries.
  virtual std::optional<Response> gated(std::vector<redis::Reply> replies) = 0;
  virtual std::optional<Response> gate_again(std::chrono::steady_clock::time_point since) = 0;
  // The job exists: nothing is left to undo, and the Intake may go on any thread.
  virtual bool settled() const = 0;
};

// One event of a job's live event stream (GET .../events): the job as it is now. Its id is a
// digest of the job's state, so a client resuming with Last-Event-ID gets the current state at
// once if it changed meanwhile, and nothing until the next change if not.
struct JobEvent {
  std::string job_id;
  std::string id;    // the state's digest
  std::string name;  // pending, processing, progress, completed, failed, cancelled
  bool terminal = false;
};
JobEvent job_event(const JobRecord& job);

struct Response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::unique_ptr<ByteSource> stream;  // sent instead of body (result downloads)
  std::unique_ptr<Intake> intake;      // accepted: the rest of the body goes here, then finish()
  std::vector<redis::Connection::Call> commit;  // see Intake::finish()
  bool gate = false;                            // commit is the intake's next gate (Intake::gated)
  // With commit (no intake): a step answered from its replies — a long-poll flagging its job
  // watched, a cancel — sent with other requests' steps while no thread waits; the answer is
  // made from the replies (on the I/O thread: cheap), or, when the batch failed, the request
  // asked again with `blocking`.
  std::function<Response(std::vector<redis::Reply>)> answer;
  std::string route = "unknown";  // metrics label, e.g. "GET /jobs/{service_type}/{id}"
  // Long-poll: wait for this job's completion notice until wait_until, then ask again with the
  // same request (and wait_until in the past).
  std::string wait_job;
  std::chrono::steady_clock::time_point wait_until{};
  // A submission that waits for its job (Prefer: wait) names the job's path here: the server
  // asks again with a GET of it (Request::after_submit), not with the submission.
  std::string wait_target;
  // An event stream: body is the job's JSON, event what it is; the server sends it as an event
  // and asks again (again = true) each time the job changes, until a terminal event.
  std::optional<JobEvent> event;
  bool close = false;  // close the connection after this answer
};

// {"error": {"code", "message", ...details}}.
Response error_response(unsigned status, const std::string& code, const std::string& message,
                        boost::json::object details = {});

// A request target as the routes read it, the origin form (path and query): the absolute form
// (`GET http://host/path?q`, sent through a proxy; RFC 9112 §3.2.2: a server must accept it)
// reduced to it, anything else as it came (refused later if malformed).
std::string origin_form(std::string_view target);

class Api {
 public:
  // resolver: the callback and input URL hosts' lookups at submission (never on a request
  // thread for longer than its timeout: see http/resolver.hpp). unsettled: where a submission
  // refused with its job's creation unknown leaves its input (unsettled.hpp).
  Api(const Config& config, storage::Storage& storage, const crypto::Encryption& encryption,
      http::Resolver& resolver, Unsettled& unsettled);
  // Blocking. `again` is true for a request the server asks about again after waiting: a
  // long-poll whose wait ended (answer whatever the state), an event stream's job that changed.
  Response handle(const Request& req, bool again = false);
  // The answers that need neither Redis nor storage (liveness, the API document, OPTIONS), given
  // at once on the I/O thread: they never queue behind uploads on the blocking pool. nullopt
  // otherwise.
  std::optional<Response> answer_at_once(const Request& req) const;
  // The pool the server runs a request's handler on, by what the request waits for, so that a
  // dependency in trouble holds only the requests that need it. Redis: the request pool (status
  // reads, listings, cancels). Storage: a submission (its input stored; a small one's whole
  // body comes with its header) and a result's download, on the storage pool with the rest of
  // uploads' writes — with S3 holding its GETs or its PUTs, 16 downloads or small submissions
  // had held every request thread and a status read waited 23 s behind them. Neither for long:
  // readiness and metrics (GET /readyz, /metrics), on a pool of their own — through a Redis
  // outage, status reads waiting out redis.retry_timeout held every request thread, and with 40
  // clients polling a job /readyz and /metrics waited 11–15 s, past a readiness probe's timeout
  // and a scrape's (2026-12-06); each makes one attempt at Redis, without retries.
  enum class Pool { requests, storage, probes };
  static Pool pool_for(const Request& req);
  // A long-poll woken by a notice that carries its job's ended record (Notifier): the answer
  // made from it, as handle() would make it from a read — when the notice is such a record, of
  // the job req asks about, and req still passes as its tenant. nullopt otherwise: read it.
  // No Redis, no storage: called on the I/O thread.
  std::optional<Response> answer_from_notice(const Request& req, const std::string& notice) const;
  // Adds what a browser needs to let a page on another origin read the answer (CORS, for the
  // origins in server.cors_origins): called on every answer but a preflight's and the
  // operator's (the dashboard is served from the gateway's own origin).
  void decorate(const Request& req, Response& r) const;
  // Where a Response's `commit` goes (Batcher::submit); null when no answer has one.
  redis::Batcher* group_commit() const { return submits_.get(); }
  // Requests waiting for Redis stop waiting (their steps throw Aborted, answered 503): for a
  // shutdown past its deadline, which must not wait out redis.retry_timeout per request.
  void stop_waiting() { stop_.request_stop(); }

 private:
  struct Context;
  Response route(const Request& req, Context& ctx, bool again);
  template <typename F>
  auto step(Context& ctx, F&& f, const std::function<void(int)>& on_retry = {});
  class Upload;  // a submission taking its input (submit.cpp)
  Response submit(const Request& req, Context& ctx, const std::string& service_type);
  // A submission whose Idempotency-Key names another job (holder; "" if the key vanished): that
  // job (202, Idempotent-Replayed), or 409 while its upload is still under way. With a wait
  // (Prefer: wait), the job is flagged watched and its end waited for, as the first request's.
  Response replayed(Context& ctx, const std::string& svc, const std::string& holder,
                    std::chrono::milliseconds wait);
  // A submission that waits for its job (Prefer: wait): the job is born watched, and the server
  // holds the answer until it ends (asking again with a read of the job).
  static void wait_for_job(Response& r, const std::string& svc, const std::string& id,
                           std::chrono::milliseconds wait);
  SubmissionRules rules_for(const std::string& service_type) const;
  // The answer to a request that failed with e: Redis or storage unavailable (503), or a body
  // that could not be read (400, closing).
  Response failure(std::exception_ptr e, std::string_view target);
  Response get_job(const Request& req, Context& ctx, const std::string& service_type,
                   const std::string& id, bool again);
  Response get_result(const Request& req, Context& ctx, const std::string& service_type,
                      const std::string& id);
  Response with_result_range(Response r, const JobRecord& rec, const std::string& key,
                             const ByteRangeSpec& range);
  Response job_events(const Request& req, Context& ctx, const std::string& service_type,
                      const std::string& id, bool again);
  // A job read for an answer, and when `watch`, flagged watched in the same step (see api.cpp).
  using Answer = std::function<Response(const std::optional<JobRecord>&)>;
  Response answered_from(const Request& req, redis::Connection::Call call,
                         std::function<Response(const redisReply*)> answer);
  Response read_job(const Request& req, Context& ctx, const std::string& service_type,
                    const std::string& id, bool watch, const Answer& answer);
  Response cancel(const Request& req, Context& ctx, const std::string& service_type,
                  const std::string& id);
  // GET /jobs (service_type empty) and GET /jobs/{service_type} (listing.cpp).
  Response list_jobs(const Request& req, Context& ctx, const std::string& service_type);
  // The operator dashboard (admin.cpp): its page and its API, with operator keys.
  Response dashboard_page();
  Response admin(const Request& req, Context& ctx, const std::vector<std::string>& segments);
  std::optional<std::string> admin_role(const Request& req) const;  // "admin", "read"
  Response ready();
  Response metrics_text();
  // OPTIONS: the route's methods, by its path alone (`*`: the server's), and a browser's
  // preflight answered.
  Response options(const Request& req) const;
  std::optional<std::string> tenant_of(const Request& req) const;

  const Config& cfg_;
  storage::Storage& storage_;
  const crypto::Encryption& enc_;
  http::Resolver& resolver_;
  Unsettled& unsettled_;
  // Requests borrow a connection for their duration (one per busy pool thread at most).
  mutable redis::ConnectionPool redis_;
  // /readyz and /metrics: connections of their own, each connect and reply waited for at most
  // kProbeWait (a Redis that stops answering is "unavailable" to them in time for a probe's
  // and a scrape's timeouts).
  mutable redis::ConnectionPool probe_redis_;
  // Submits from many requests share round trips (group commit); not in cluster mode with
  // redis.wait_replicas (see redis/batcher.hpp).
  std::unique_ptr<redis::Batcher> submits_;
  redis::Keys keys_;
  ApiKeys api_keys_;
  std::stop_source stop_;
  Cors cors_;
};

}  // namespace relay::gateway
