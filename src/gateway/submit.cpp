// POST /jobs/{service_type}: a submission, in two halves. Api::submit decides from the header
// alone (route, auth, declared size, options of a raw body, Idempotency-Key) whether the input
// is wanted; then an Upload takes the body as the server receives it — multipart parsed as it
// streams, the input encrypted and written to storage piece by piece — and finish() records the
// job. Nothing holds a thread while the client is slow: the server calls in only with bytes.

#include <boost/url/parse.hpp>

#include "common/job_id.hpp"
#include "common/log.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "common/trace.hpp"
#include "common/utf8.hpp"
#include "crypto/streaming_aead.hpp"
#include "gateway/api_steps.hpp"
#include "gateway/callback_url.hpp"
#include "gateway/metrics.hpp"
#include "gateway/prefer_wait.hpp"
#include "gateway/submission.hpp"
#include "http/destination.hpp"
#include "multipart/parser.hpp"
#include "redis/schedules.hpp"
#include "storage/object_keys.hpp"

namespace relay::gateway {
namespace {

constexpr std::chrono::milliseconds kNoWait{0};

// Thrown by the upload path when the input outgrows its limit.
struct TooLarge {};
// Thrown when a submission has an input_url and an input of its own as well.
struct BothInputs {};

Response refusal_response(const Refusal& r) {
  return error_response(r.status, r.code, r.message);
}

}  // namespace

class Api::Upload final : public Intake, private multipart::Handler {
 public:
  // declared: the raw body's Content-Length, when there is one (storage can then stream it).
  Upload(Api& api, std::string tenant, std::string svc, std::uint64_t limit,
         std::optional<std::string> boundary, std::optional<std::uint64_t> declared, Submission sub,
         bool priority, std::string idem_key, TraceParent trace, std::string tracestate,
         std::chrono::milliseconds wait)
      : api_(api),
        tenant_(std::move(tenant)),
        svc_(std::move(svc)),
        st_(api.cfg_.service_types.at(svc_)),
        limit_(limit),
        declared_(declared),
        sub_(std::move(sub)),
        priority_(priority),
        idem_key_(std::move(idem_key)),
        quota_(api.cfg_.quota_for(tenant_)),
        trace_(std::move(trace)),
        tracestate_(std::move(tracestate)),
        wait_(wait),
        job_id_(new_job_id()),
        input_key_(input_object_key(svc_, job_id_)) {
    if (boundary) parser_.emplace(*boundary, static_cast<multipart::Handler&>(*this));
  }

  // Any way out but success removes what this request stored and frees its Idempotency-Key —
  // unless the job may exist (lost_): then its input, key and admission may be the job's, and
  // the GC settles the input once Redis answers (unsettled.hpp); the key's reservation expires
  // and the reaper sweeps an admission no job holds.
  ~Upload() override {
    if (done_) return;
    sealer_.reset();
    object_.reset();  // an uncommitted object leaves nothing behind
    if (lost_) {
      if (committed_) api_.unsettled_.add({st_.model, svc_, job_id_});
      log::warn("submission refused with its job's creation unknown: input kept until known",
                {{"job_id", job_id_}});
      return;
    }
    try {
      if (committed_) api_.storage_.remove(input_key_);
    } catch (const std::exception& e) {
      log::warn("cannot delete the input of a refused submission",
                {{"key", input_key_}, {"error", e.what()}});
      held_ = false;  // (the hold stays: GC deletes it later)
    }
    if (key_reserved_ || admitted_ || held_) {
      try {
        auto conn = api_.redis_.borrow();
        redis::JobStore store(conn->get(), api_.keys_);
        if (key_reserved_) store.release_idempotency(idem_key_, job_id_);
        if (admitted_) store.release(tenant_, st_.model, job_id_);
        if (held_)
          redis::Schedules(conn->get(), api_.keys_).release_upload(st_.model, svc_, job_id_);
      } catch (...) {  // best effort: the reservation expires, the reaper sweeps the admission
      }
    }
  }

  // The gates this submission passes before its body is taken (see Intake): its Idempotency-
  // Key reserved for it while its body comes (from then the upload renews the reservation, and
  // frees it if no job comes of it), then its tenant's quota admission. Each is a round trip
  // no thread waits for when the group commit is there (a Redis pausing writes held a request
  // thread per submission), blocking otherwise (gate_again()).
  void reserve_key_first() { gate_ = Gate::reservation; }
  // The next gate as an answer carrying its calls; nullopt when none is left.
  std::optional<Response> gate() {
    Response r;
    r.gate = true;
    if (gate_ == Gate::reservation) {
      r.commit = redis::JobStore::reserve_idempotency_calls(idem_key_, job_id_,
                                                            api_.cfg_.idempotency_reservation);
      return r;
    }
    if (gate_ == Gate::admission && quota_.any()) {
      r.commit = {redis::JobStore::admit_call(api_.keys_, tenant_, st_.model, job_id_, quota_)};
      return r;
    }
    gate_ = Gate::open;
    return std::nullopt;
  }

  std::optional<Response> gated(std::vector<redis::Reply> replies) override {
    try {
      if (gate_ == Gate::reservation) {
        auto holder = redis::JobStore::reservation_holder(replies);
        if (holder && *holder != job_id_) {
          replay_of_ = std::move(*holder);  // its answer reads a record: gate_again()
          Response blocking;
          blocking.gate = true;
          return blocking;
        }
        key_reserved_ = true;
        gate_ = Gate::admission;
        return gate();
      }
      if (auto refused = admission(redis::JobStore::admitted(replies.at(0).get()))) return refused;
      gate_ = Gate::open;
      return std::nullopt;
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  std::optional<Response> gate_again(std::chrono::steady_clock::time_point since) override {
    since_ = since;
    try {
      auto step = [this](auto f) {
        auto conn = api_.redis_.borrow();
        Context ctx{*conn, tenant_, std::exchange(since_, {})};
        return api_.step(ctx, f);
      };
      if (gate_ == Gate::reservation && !replay_of_) {
        auto holder = step([&](redis::JobStore& store, redis::Connection&) {
          return store.reserve_idempotency(idem_key_, job_id_, api_.cfg_.idempotency_reservation);
        });
        if (holder && *holder != job_id_) replay_of_ = std::move(*holder);
        key_reserved_ = !replay_of_;
        gate_ = Gate::admission;
      }
      if (replay_of_) return replay(*replay_of_);
      if (gate_ == Gate::admission && quota_.any()) {
        auto admitted = step([&](redis::JobStore& store, redis::Connection&) {
          return store.admit(tenant_, st_.model, job_id_, quota_);
        });
        if (auto refused = admission(admitted)) return refused;
      }
      gate_ = Gate::open;
      return std::nullopt;
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  std::optional<Response> write(std::string_view bytes) override {
    try {
      if (!parser_ && !sub_.input_url.empty() && !bytes.empty()) throw BothInputs{};
      if (parser_)
        parser_->feed(bytes);
      else
        input(bytes);
      renew_reservation();  // (after: the bytes that take an input past kHoldAfter count)
      return std::nullopt;
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  Response finish() override {
    try {
      if (parser_) {
        parser_->finish();
        end_field();
        if (have_file_ && !sub_.input_url.empty()) throw BothInputs{};
        if (!have_file_ && sub_.input_url.empty())
          return error_response(400, "missing_input",
                                "the multipart body has no 'file' part (nor an input_url)");
        SubmissionRules rules = api_.rules_for(svc_);
        if (auto bad = validate(sub_, rules)) return refusal_response(*bad);
      }
      if (sub_.input_url.empty()) {
        if (!object_) open_input();  // an empty raw body
        if (sealer_) sealer_->finish();
        object_->commit();
        committed_ = true;
      }
      // The job's record goes to Redis with other requests' while no thread waits for it (the
      // server sends it; see Intake); an Idempotency-Key is claimed in the same step.
      if (api_.submits_) {
        Response r;
        const auto c = claim();
        r.commit = redis::JobStore::submit_calls(api_.keys_, record(), priority_,
                                                 api_.cfg_.job_retention, held_, c ? &*c : nullptr);
        return r;
      }
      return create_job(/*maybe_ran=*/false);
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  std::optional<Response> committed(std::vector<redis::Reply> replies) override {
    try {
      auto outcome = redis::JobStore::submit_outcome(replies);
      if (outcome.made) return created();
      if (outcome.holder.empty()) throw std::runtime_error("job id collision");
      replay_of_ = std::move(outcome.holder);  // its answer reads a record: commit_again()
      return std::nullopt;
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  Response commit_again(std::chrono::steady_clock::time_point since, bool lost) override {
    since_ = since;
    lost_ = lost_ || lost;
    try {
      if (replay_of_) return replay(*replay_of_);
      return create_job(/*maybe_ran=*/true);
    } catch (...) {
      return refusal(std::current_exception());
    }
  }

  bool settled() const override { return done_; }

 private:
  // The tenant quota's answer: a refusal (429, naming the limit), or nullopt — admitted. Under
  // max_pending the slot is held by this job from then, freed if the submission fails (and by
  // the completion consumer once the job ends).
  std::optional<Response> admission(const redis::Admission& a) {
    const redis::Quota& q = quota_;
    using Outcome = redis::Admission::Outcome;
    if (a.outcome == Outcome::ok) {
      if (q.max_pending > 0) admitted_ = true;
      return std::nullopt;
    }
    const bool pending = a.outcome == Outcome::max_pending;
    metrics().quota_refusals.add({tenant_, pending ? "max_pending" : "submit_rate"});
    // The codes are SPEC §12.3's; "limit" says which quota refused, as quotas.* names it.
    Response r = pending
                     ? error_response(429, "quota_exceeded",
                                      "this tenant has " + std::to_string(q.max_pending) +
                                          " jobs not yet ended, the most quotas.max_pending allows",
                                      {{"limit", "max_pending"}})
                     : error_response(429, "rate_limited",
                                      "this tenant submits faster than its " +
                                          std::to_string(q.submits_per_minute) + " per minute",
                                      {{"limit", "submit_rate"}});
    // When a token is back; a pending slot frees when a job ends (a guess: a few seconds).
    const auto secs = pending ? 5 : (a.retry_after.count() + 999) / 1000;
    r.headers.emplace_back("Retry-After", std::to_string(std::max<std::int64_t>(1, secs)));
    return r;
  }

  void open_input() {
    std::optional<std::uint64_t> size;
    if (!parser_ && declared_)
      size = api_.enc_.enabled ? crypto::ciphertext_size(*declared_, api_.enc_.params) : *declared_;
    object_ = api_.storage_.create(input_key_, {}, size);
    // Inputs are encrypted as they stream to storage, bound to this job ("<id>/input").
    if (api_.enc_.enabled)
      sealer_ = std::make_unique<crypto::EncryptingWriter>(
          *object_, *api_.enc_.keyring.get(api_.enc_.active_id), crypto::input_aad(job_id_),
          api_.enc_.params);
  }

  void input(std::string_view bytes) {
    if (!object_) open_input();
    size_ += bytes.size();
    if (size_ > limit_) throw TooLarge{};
    if (sealer_)
      sealer_->write(bytes);
    else
      object_->write(bytes);
  }

  // What an upload holds lives as long as it makes progress, no longer, so that a crashed
  // gateway's leftovers free themselves within idempotency.reservation: its Idempotency-Key
  // stays reserved, its quota admission is not taken for one a crashed gateway left, and past
  // kHoldAfter bytes its input is held for deletion (Schedules::hold_upload) until the job
  // exists. (Smaller inputs are stored and recorded within moments; a crash in between leaves
  // at most that much.)
  static constexpr std::uint64_t kHoldAfter = 1 << 20;
  void renew_reservation() {
    const bool hold = size_ > kHoldAfter;
    if (!key_reserved_ && !admitted_ && !hold) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_renewal_ < api_.cfg_.idempotency_reservation / 3 && (held_ || !hold)) return;
    last_renewal_ = now;
    if (key_reserved_ || admitted_) {
      auto conn = api_.redis_.borrow();
      redis::JobStore store(conn->get(), api_.keys_);
      if (key_reserved_)
        store.renew_idempotency(idem_key_, job_id_, api_.cfg_.idempotency_reservation);
      if (admitted_) store.renew(tenant_, st_.model, job_id_);
    }
    if (hold) {
      // Best effort: a Redis that fails over mid-upload must not fail the upload (creating the
      // job retries); without the hold only a crash before the job exists would leave the input.
      held_ = true;  // (may exist: released with the job, or when refused; either is harmless)
      try {
        const auto due = wall_now() + api_.cfg_.idempotency_reservation;
        auto conn = api_.redis_.borrow();
        redis::Schedules(conn->get(), api_.keys_)
            .hold_upload(
                st_.model, svc_, job_id_,
                std::chrono::duration_cast<std::chrono::milliseconds>(due.time_since_epoch())
                    .count());
      } catch (const std::exception& e) {
        log::warn("cannot hold a large upload's input for deletion; going on",
                  {{"job_id", job_id_}, {"error", e.what()}});
      }
    }
  }

  void on_part(const multipart::PartInfo& part) override {
    end_field();
    field_name_ = part.name;
    field_.clear();
    if (part.name == "file") {
      if (have_file_) throw multipart::Error("more than one file part");
      have_file_ = true;
      in_file_ = true;
      sub_.filename = part.filename;
      sub_.content_type = part.content_type;
      open_input();  // an empty file part is an empty input
    } else {
      in_file_ = false;
      field_max_ = max_field_size(part.name);
    }
  }

  void on_data(std::string_view d) override {
    if (in_file_) return input(d);
    // Options are kept; other fields are read through and dropped (within a bound either way).
    const std::size_t max = field_max_ ? field_max_ : kMaxIgnoredField;
    if (field_size_ + d.size() > max) throw multipart::Error("form field too large");
    field_size_ += d.size();
    if (field_max_) field_.append(d);
  }

  void end_field() {
    if (!in_file_ && field_max_) sub_.set(field_name_, std::move(field_));
    field_.clear();
    field_size_ = 0;
    field_max_ = 0;
    in_file_ = false;
  }

  // What the client is told when its input cannot be taken.
  Response refusal(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const BothInputs&) {
      return error_response(400, "invalid_input_url",
                            "give the input as a file or as an input_url, not both");
    } catch (const TooLarge&) {
      return error_response(413, "too_large",
                            "the input is larger than " + std::to_string(limit_) + " bytes");
    } catch (const multipart::Error& e) {
      return error_response(400, "malformed_multipart", e.what());
    } catch (const storage::StorageError& e) {
      log::error("cannot store an input", {{"job_id", job_id_}, {"error", e.what()}});
      return error_response(503, "storage_unavailable",
                            "the input could not be stored; retry later");
    } catch (...) {
      auto r = api_.failure(std::current_exception(), "POST /jobs/" + svc_);
      if (lost_ && !replay_of_ && r.status == 503) {
        // The client may learn what happened without submitting again: GET the job.
        r.body = error_response(r.status, "redis_unavailable",
                                "the job store did not answer; the job may have been created: "
                                "GET it to know, or submit again with the same Idempotency-Key",
                                {{"job_id", job_id_}})
                     .body;
      }
      return r;
    }
  }

  // The job's record, as submitted (made once: a commit that failed resends the same).
  const JobRecord& record() {
    if (record_) return *record_;
    JobRecord& r = record_.emplace();
    r.id = job_id_;
    r.service_type = svc_;
    r.model = st_.model;
    r.operation = sub_.operation;
    r.tenant = tenant_;
    if (sub_.input_url.empty()) {
      r.input_key = input_key_;
    } else {
      // By reference: the relay reads it (at most the limit an upload would have); its name
      // is the URL's last segment unless the client gave one.
      r.input_url = sub_.input_url;
      r.input_max_size = limit_;
      if (sub_.filename.empty()) {
        std::string path = sub_.input_url.substr(0, sub_.input_url.find_first_of("?#"));
        sub_.filename = path.substr(path.rfind('/') + 1);
      }
      if (sub_.content_type.starts_with("multipart/")) sub_.content_type.clear();
    }
    // Shown in job JSON: valid UTF-8, cut on a character boundary.
    r.input_filename = sub_.filename.empty() ? "input" : utf8_clean(sub_.filename, 255);
    r.input_content_type =
        sub_.content_type.empty() ? "application/octet-stream" : utf8_clean(sub_.content_type, 255);
    r.input_size = size_;
    r.params = sub_.params;
    r.callback_url = sub_.callback_url;
    r.webhook_events = normalized_webhook_events(sub_.webhook_events);
    r.priority = priority_;
    r.traceparent = trace_.header();
    r.tracestate = tracestate_;
    r.key_id = api_.enc_.enabled ? api_.enc_.active_id : "";
    // Waited for from birth: its end is announced without a watch step of its own.
    r.watched = wait_.count() > 0;
    r.created_at = wall_now();
    // Deadlines: the submission's, else the service type's default.
    if (auto ttl = deadline_option(sub_.ttl) ? deadline_option(sub_.ttl) : st_.ttl)
      r.expires_at = *r.created_at + *ttl;
    r.timeout = deadline_option(sub_.timeout) ? deadline_option(sub_.timeout) : st_.timeout;
    // Retries: the submission's attempts, else the service type's; recorded only when opted in.
    const std::int64_t attempts =
        sub_.max_attempts.empty() ? st_.max_attempts : std::stoll(sub_.max_attempts);
    if (attempts > 1) {
      r.max_attempts = attempts;
      r.retry_backoff = st_.retry_backoff;
      r.retry_max_backoff = st_.retry_max_backoff;
    }
    return r;
  }

  // Records the job (blocking). maybe_ran: an earlier attempt (a failed group commit) may have.
  Response create_job(bool maybe_ran) {
    const JobRecord& r = record();
    auto conn = api_.redis_.borrow();
    Context ctx{*conn, tenant_, std::exchange(since_, {})};
    // An attempt that fails after Redis received it may have run: a retry that then finds the
    // id taken is that attempt's success (ids are random 128-bit: nobody else has this one).
    bool retried = maybe_ran;
    const auto c = claim();
    auto outcome = api_.step(
        ctx,
        [&](redis::JobStore& store, redis::Connection& conn) {
          // Listed from now, in the same round trip. Not acknowledged before replicas have it:
          // a failover must not drop it. Too few acks is an unknown outcome, retried (on the
          // new master once the sentinels say so).
          auto calls = redis::JobStore::submit_calls(
              api_.keys_, r, priority_, api_.cfg_.job_retention, held_, c ? &*c : nullptr);
          try {
            if (api_.submits_)  // with the other requests' submits; its batch ends with the WAIT
              return redis::JobStore::submit_outcome(api_.submits_->pipeline(calls));
            auto o = redis::JobStore::submit_outcome(conn.pipeline(calls));
            store.require_replicas(api_.cfg_.redis.wait_replicas);
            return o;
          } catch (const redis::IoError& e) {
            lost_ = lost_ || redis::may_have_run(e);  // sent, its reply lost: it may have run
            throw;
          }
        },
        [&](int) { retried = true; });
    if (!outcome.holder.empty()) return replay(outcome.holder);
    if (!outcome.made && !retried) throw std::runtime_error("job id collision");
    return created();
  }

  // The Idempotency-Key's claim in the submit step: the key names the job for its retention.
  std::optional<redis::JobStore::IdempotencyClaim> claim() const {
    if (idem_key_.empty()) return std::nullopt;
    return redis::JobStore::IdempotencyClaim{idem_key_, api_.cfg_.job_retention};
  }

  // The Idempotency-Key names another job (its request came first): that job is the answer,
  // and this one's input goes (the key is not ours to free).
  Response replay(const std::string& holder) {
    key_reserved_ = false;
    auto conn = api_.redis_.borrow();
    Context ctx{*conn, tenant_, std::exchange(since_, {})};
    return api_.replayed(ctx, svc_, holder, wait_);
  }

  // The job exists: the answer.
  Response created() {
    const JobRecord& r = *record_;
    done_ = true;  // keep its input and key
    metrics().jobs_submitted.add({svc_});
    log::info("job submitted", {{"job_id", job_id_},
                                {"service_type", svc_},
                                {"model", st_.model},
                                {"size", size_},
                                {"priority", priority_},
                                {"tenant", tenant_},
                                {"trace_id", trace_.trace_id}});
    Response resp;
    resp.status = 202;
    resp.body = job_json(r);
    resp.headers.emplace_back("Location", "/jobs/" + svc_ + "/" + job_id_);
    if (wait_.count() > 0) wait_for_job(resp, svc_, job_id_, wait_);
    return resp;
  }

  Api& api_;
  const std::string tenant_, svc_;
  const ServiceType& st_;
  const std::uint64_t limit_;
  const std::optional<std::uint64_t> declared_;
  Submission sub_;
  const bool priority_;
  const std::string idem_key_;  // the Idempotency-Key's key ("" without one)
  const redis::Quota quota_;    // the tenant's
  enum class Gate { reservation, admission, open } gate_ = Gate::admission;  // the next, see gate()
  bool key_reserved_ = false;             // reserved by this upload (gate())
  std::optional<std::string> replay_of_;  // a gate or committed() found the key naming another job
  // gate_again(), commit_again(): when the failed batch took the step, for the next step's
  // retries (they count from then).
  std::chrono::steady_clock::time_point since_{};
  // A step creating the job was sent and its reply never came: the job may exist (see ~Upload).
  bool lost_ = false;
  const TraceParent trace_;
  const std::string tracestate_;
  const std::chrono::milliseconds wait_;  // Prefer: wait (0: the answer at once)
  const std::string job_id_, input_key_;

  std::optional<JobRecord> record_;
  std::optional<multipart::Parser> parser_;
  std::string field_name_, field_;  // the form field being read
  std::size_t field_size_ = 0, field_max_ = 0;
  bool in_file_ = false, have_file_ = false;

  std::unique_ptr<storage::ObjectWriter> object_;
  std::unique_ptr<crypto::EncryptingWriter> sealer_;  // in front of object_ when encrypting
  std::uint64_t size_ = 0;                            // plaintext bytes of the input
  bool committed_ = false, done_ = false, admitted_ = false;
  bool held_ = false;  // the input held for deletion until the job exists (renew_reservation)
  std::chrono::steady_clock::time_point last_renewal_ = std::chrono::steady_clock::now();
};

SubmissionRules Api::rules_for(const std::string& svc) const {
  SubmissionRules rules;
  rules.service_type = svc;
  rules.operations = cfg_.service_types.at(svc).operations;
  rules.webhooks_configured = !cfg_.webhook_secret.empty();
  rules.check_callback = [this](const std::string& url) {
    return check_callback_url(url, cfg_.webhook_allow_private, nullptr, &resolver_);
  };
  rules.input_urls = cfg_.service_types.at(svc).input_urls;
  rules.check_input_host = [this](const std::string& url) {
    return http::check_destination(
        url, {{"https"}, cfg_.input_urls_allow_private, "input_url", "input_urls.allow_private"},
        nullptr, &resolver_);
  };
  return rules;
}

void Api::wait_for_job(Response& r, const std::string& svc, const std::string& id,
                       std::chrono::milliseconds wait) {
  r.wait_job = id;
  r.wait_until = std::chrono::steady_clock::now() + wait;
  r.wait_target = "/jobs/" + svc + "/" + id;
}

Response Api::replayed(Context& ctx, const std::string& svc, const std::string& holder,
                       std::chrono::milliseconds wait) {
  if (!holder.empty()) {
    const std::string& model = cfg_.service_types.at(svc).model;
    auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
      // Flagged and read in one round trip, as a long-poll's read (an end after it is heard).
      if (wait.count() > 0) return store.get_watched(model, holder, ctx.tenant, svc);
      return store.get(model, holder);
    });
    if (rec && rec->tenant == ctx.tenant) {
      Response r;
      r.status = 202;
      r.body = job_json(*rec);
      r.headers.emplace_back("Location", "/jobs/" + rec->service_type + "/" + rec->id);
      r.headers.emplace_back("Idempotent-Replayed", "true");
      if (wait.count() > 0 && is_terminal(rec->status)) r.status = 200;
      // (Of another service type of the model, not flagged: not waited for.)
      else if (wait.count() > 0 && rec->service_type == svc)
        wait_for_job(r, svc, rec->id, wait);
      return r;
    }
  }
  // (Reserved by an upload still under way: its job does not exist yet.)
  return error_response(409, "idempotency_in_progress",
                        "a request with this Idempotency-Key is still being processed");
}

Response Api::submit(const Request& req, Context& ctx, const std::string& svc) {
  const ServiceType& st = cfg_.service_types.at(svc);
  const std::uint64_t limit = static_cast<std::uint64_t>(
      st.max_input_size > 0 ? std::min(st.max_input_size, cfg_.max_body_size) : cfg_.max_body_size);
  // Options: query parameters for a raw body, checked now, before its body is read; form fields
  // for multipart, checked once the body is in.
  Submission sub;
  auto target = boost::urls::parse_origin_form(req.target);
  for (auto p : target->params()) sub.set(p.key, std::string(p.value));
  if (!req.has_body && sub.input_url.empty())
    return error_response(400, "missing_input", "the request has no body (nor an input_url)");
  if (req.content_length && *req.content_length > limit)
    return error_response(413, "too_large",
                          "the input is larger than " + std::to_string(limit) + " bytes");

  const std::string content_type = req.header("content-type");
  const bool multipart =
      content_type.size() >= 10 && (content_type.compare(0, 10, "multipart/") == 0 ||
                                    content_type.compare(0, 10, "Multipart/") == 0);
  std::optional<std::string> boundary;
  if (multipart) {
    boundary = multipart::boundary_of(content_type);
    if (!boundary)
      return error_response(415, "unsupported_media_type",
                            "multipart bodies must be multipart/form-data with a boundary");
  }

  if (!multipart) {
    if (auto bad = validate(sub, rules_for(svc))) return refusal_response(*bad);
    sub.content_type = content_type;
  }

  std::string idem_key;
  if (std::string k = req.header("idempotency-key"); !k.empty()) {
    if (k.size() > 256)
      return error_response(400, "invalid_idempotency_key",
                            "Idempotency-Key is longer than 256 characters");
    idem_key = keys_.idempotency(st.model, ctx.tenant, sha256_hex(k));
  }
  const bool priority = !cfg_.priority_header.empty() && !req.header(cfg_.priority_header).empty();
  // (Made before the key is reserved: the upload owns the reservation, and frees it, from then.)
  const bool reserve = !idem_key.empty() && !req.body_complete;
  // The client's trace, or a new one: every job has a trace_id for its log lines.
  // (A tracestate goes with the traceparent it came with, never with a new trace.)
  auto given = parse_traceparent(req.header("traceparent"));
  TraceParent trace = given.value_or(new_trace());
  std::string tracestate = given ? clean_tracestate(req.header("tracestate")) : std::string();
  // Prefer: wait — the answer held until the job ends (gateway/prefer_wait.hpp).
  const auto wait = preferred_wait(req.header("prefer"), cfg_.max_wait).value_or(kNoWait);
  auto upload = std::make_unique<Upload>(
      *this, ctx.tenant, svc, limit, boundary, req.content_length, std::move(sub), priority,
      std::move(idem_key), std::move(trace), std::move(tracestate), wait);

  // Idempotency-Key: the step that makes the job claims it (a retry finds the first job, and of
  // two requests at once one makes the job). A body still to come reserves it first, for the new
  // id: a retry then finds it reserved rather than uploading again; reserved for as long as an
  // upload may stall, renewed while it progresses. (Reserving every submission's cost a round
  // trip a request thread waited for: a third of the gateway's CPU per keyed job, and both
  // clients send a key with every submission; issue 14's benchmark with --idempotency-keys.)
  // Quotas: charged before anything is stored; a refusal stores nothing and says which limit.
  // Both are gates (see Upload::gate): with the group commit, sent with other requests' steps
  // while the server, not this thread, waits for the replies.
  if (reserve) upload->reserve_key_first();
  if (submits_) {
    if (auto gate = upload->gate()) {
      gate->intake = std::move(upload);
      return std::move(*gate);
    }
  } else if (auto answer = upload->gate_again({})) {
    return std::move(*answer);
  }

  // What the server already received goes in now; a body received whole is answered at once.
  if (!req.body.empty())
    if (auto refused = upload->write(req.body)) return std::move(*refused);
  if (req.body_complete) {
    Response r = upload->finish();
    if (!r.commit.empty()) r.intake = std::move(upload);  // it answers once that went through
    return r;
  }
  Response r;
  r.intake = std::move(upload);
  return r;
}

}  // namespace relay::gateway
