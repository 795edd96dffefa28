#include "sidecar/job_runner.hpp"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <charconv>
#include <chrono>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "common/json_members.hpp"
#include "common/log.hpp"
#include "common/time.hpp"
#include "common/trace.hpp"
#include "common/utf8.hpp"
#include "crypto/primed_source.hpp"
#include "sidecar/inference_client.hpp"
#include "storage/input_url.hpp"
#include "storage/object_keys.hpp"
#include "storage/resume.hpp"
#include "storage/resuming_source.hpp"

namespace relay::sidecar {
namespace {

using Clock = std::chrono::steady_clock;

// Tries of the result's upload, at least, before the job fails upload_failed (storage
// unavailable only); for relay.storage_retry_timeout from the first try, if that is longer.
constexpr int kUploadAttempts = 4;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Counts the time spent waiting on the storage download while it streams into the POST, so
// that download and inference can be reported apart although they overlap.
class TimedSource final : public ByteSource {
 public:
  explicit TimedSource(ByteSource& inner) : inner_(inner) {}
  size_t read(std::span<char> buf) override {
    auto t = Clock::now();
    size_t n = inner_.read(buf);
    spent_ms_ += ms_since(t);
    return n;
  }
  std::optional<std::uint64_t> size() const override { return inner_.size(); }
  double spent_ms() const { return spent_ms_; }

 private:
  ByteSource& inner_;
  double spent_ms_ = 0;
};

// Bytes held elsewhere as a stream (an input read ahead: the caller keeps its buffer).
class ViewSource final : public ByteSource {
 public:
  explicit ViewSource(std::string_view data) : data_(data) {}
  size_t read(std::span<char> buf) override {
    const size_t n = data_.copy(buf.data(), buf.size());
    data_.remove_prefix(n);
    return n;
  }
  std::optional<std::uint64_t> size() const override { return data_.size(); }

 private:
  std::string_view data_;
};

// Marks which stage a storage error came from.
enum class Stage { prepare, download, inference, upload };

JobResult failed(std::string code, std::string message) {
  JobResult r;
  r.disposition = Disposition::failed;
  r.error_code = std::move(code);
  r.error_message = std::move(message);
  return r;
}

JobResult timed_out(const JobRecord& job) {
  return failed("timed_out", "the job ran longer than its timeout of " +
                                 format_duration(job.timeout.value_or(Millis(0))));
}

}  // namespace

void Timings::set(std::string_view stage, double ms) {
  for (auto& [name, v] : stages_)
    if (name == stage) {
      v = ms;
      return;
    }
  stages_.emplace_back(std::string(stage), ms);
}

bool Timings::has(std::string_view stage) const {
  for (const auto& [name, v] : stages_)
    if (name == stage) return true;
  return false;
}

std::string Timings::json() const {
  std::string out = "{";
  for (const auto& [name, v] : stages_) {
    char num[48];
    auto end =
        std::to_chars(num, num + sizeof num, std::clamp(v, 0.0, 1e15), std::chars_format::fixed, 3);
    if (out.size() > 1) out += ',';
    out += '"';
    out += name;
    out += "\":";
    out.append(num, end.ptr);
  }
  return out + "}";
}

boost::json::object Timings::micros() const {
  boost::json::object o;
  for (const auto& [name, v] : stages_) o[name] = static_cast<std::int64_t>(v * 1000.0 + 0.5);
  return o;
}

namespace {

// What an exception that ended a job at `stage` makes of it.
JobResult failure_of(std::exception_ptr error, Stage stage, const JobRecord& job,
                     JobControl& control) {
  try {
    std::rethrow_exception(error);
  } catch (const Aborted&) {
    JobResult result;
    switch (control.reason()) {
      case StopReason::cancelled:
        result.disposition = Disposition::cancelled;
        break;
      case StopReason::lease_lost:
        result.disposition = Disposition::abandoned;
        break;
      case StopReason::timed_out:
        result = timed_out(job);
        break;
      default:
        result.disposition = Disposition::given_back;
        break;
    }
    return result;
  } catch (const crypto::DecryptionError& e) {
    return failed("decryption_failed", e.what());
  } catch (const storage::StorageError& e) {
    // Short of the upload, a storage error of an input by reference is the input's.
    if (!job.input_url.empty() && stage != Stage::upload)
      // What retrying could fix (unreachable, 5xx, 429) apart from what it cannot.
      return failed(e.kind() == storage::ErrorKind::invalid       ? "input_url_refused"
                    : e.kind() == storage::ErrorKind::too_large   ? "input_too_large"
                    : e.kind() == storage::ErrorKind::unavailable ? "input_fetch_failed"
                                                                  : "input_unreadable",
                    e.what());
    JobResult result =
        failed(stage == Stage::upload ? "upload_failed" : "download_failed", e.what());
    // (Already retried in place: ResumingSource for the input, kUploadAttempts for the result.)
    result.storage_unavailable = e.kind() == storage::ErrorKind::unavailable;
    return result;
  } catch (const InferenceError& e) {
    // Refused before the request (a model server restarting, its container OOM-killed): the job
    // never reached it. Failing it — and each job after it, a connection refused in a
    // millisecond — drained a long-running relay's queue into failures while the model came back.
    // (A shutdown meanwhile gives it back all the same; a cancel or the job's limit ends it.)
    if (!e.reached() &&
        (control.reason() == StopReason::none || control.reason() == StopReason::shutdown)) {
      JobResult away = failed(e.code(), e.what());
      away.disposition = Disposition::model_away;
      return away;
    }
    return failed(e.code(), e.what());
  } catch (const std::exception& e) {
    // A surprise: fail the job rather than leave it processing for the reaper to retry for ever.
    log::error("unexpected error in job", {{"job_id", job.id}, {"error", e.what()}});
    return failed("internal_error", e.what());
  }
}

// The checks every result gets, and its timings.
JobResult finished(JobResult result, const JobControl& control, const JobRecord& job,
                   Timings timings, Clock::time_point start, double download_ms) {
  // A lost lease always means: write nothing. A cancel that lands after the result was stored
  // loses the race — the work is done, the job completes — but it turns a failure into a cancel.
  if (control.reason() == StopReason::lease_lost)
    result.disposition = Disposition::abandoned;
  else if (result.disposition == Disposition::failed && control.reason() == StopReason::cancelled)
    result.disposition = Disposition::cancelled;
  // The limit cut the work short; whatever failed then failed because of it.
  else if (result.disposition == Disposition::failed && control.reason() == StopReason::timed_out)
    result = timed_out(job);
  if (!timings.has("download") && download_ms > 0) timings.set("download", download_ms);
  timings.set("total", ms_since(start));
  result.timings = std::move(timings);
  return result;
}

}  // namespace

std::optional<PrefetchedInput> prefetch_input(storage::Storage& storage, const JobRecord& job,
                                              std::size_t max_bytes, std::stop_token stop,
                                              std::string buffer) {
  if (job.input_key.empty() || !job.input_url.empty()) return std::nullopt;
  if (job.input_size > max_bytes) return std::nullopt;  // (sealed, it is larger still)
  const auto t = Clock::now();
  try {
    storage::ResumingSource source(storage, job.input_key, stop);
    // Read straight into the (reused) buffer: no copy, and no fresh pages to fault in per job.
    // Too large as stored: known before a byte is read (an encrypted input is larger stored
    // than its input_size says; read up to the limit and dropped, it cost a job's worth).
    if (source.size() > max_bytes) return std::nullopt;
    PrefetchedInput in{job.id, std::move(buffer), 0};
    size_t have = 0;
    in.bytes.resize(std::min<std::uint64_t>(source.size().value_or(64 * 1024), max_bytes) + 1);
    while (size_t n = source.read({in.bytes.data() + have, in.bytes.size() - have})) {
      have += n;
      if (have > max_bytes) return std::nullopt;
      if (have == in.bytes.size()) in.bytes.resize(std::min(2 * have, max_bytes + 1));
    }
    in.bytes.resize(have);
    in.ms = ms_since(t);
    return in;
  } catch (const std::exception&) {
    return std::nullopt;  // (read again when the job runs, which says what fails)
  }
}

std::variant<JobResult, Answer> run_model(const Config& cfg, storage::Storage& storage,
                                          InferenceClient& inference, const crypto::Encryption& enc,
                                          const JobRecord& job, JobControl& control,
                                          const std::string& progress_url,
                                          ModelAtWork while_model_works,
                                          const PrefetchedInput* prefetched) {
  const auto start = Clock::now();
  Timings timings;
  if (job.created_at && job.started_at)
    timings.set(
        "queue_wait",
        std::chrono::duration<double, std::milli>(*job.started_at - *job.created_at).count());
  double download_ms = 0;
  Stage stage = Stage::prepare;
  JobResult result;
  try {
    const std::string op = job.operation.empty() ? "default" : job.operation;
    auto route = cfg.inference.routes.find(op);
    if (route == cfg.inference.routes.end())
      return failed("unknown_operation",
                    "no inference route for operation '" + op + "' in inference.routes");
    if (job.input_key.empty() && job.input_url.empty())
      return failed("invalid_job", "the job record has no input_key");
    std::vector<std::pair<std::string, std::string>> params;
    if (!job.params.empty()) {
      boost::system::error_code ec;
      auto v = boost::json::parse(job.params, ec);
      if (ec || !v.is_object())
        return failed("invalid_job", "the job's params are not a JSON object");
      params = json_members_as_written(job.params);  // numbers byte for byte
    }

    // An encrypted job needs its key before anything is read. (An input by reference is the
    // client's own object, never encrypted by us; its result is.)
    std::optional<std::string> key;
    if (!job.key_id.empty()) {
      key = enc.keyring.get(job.key_id);
      if (!key)
        return failed("decryption_failed", "the job's input is encrypted with key '" + job.key_id +
                                               "', which this relay has not loaded");
    }

    stage = Stage::download;
    auto t_open = Clock::now();
    std::unique_ptr<ByteSource> input;
    if (prefetched && prefetched->job_id == job.id) {
      // Read while the model ran the job before this one.
      input = std::make_unique<ViewSource>(prefetched->bytes);
      download_ms += prefetched->ms;
    } else if (!job.input_url.empty()) {
      storage::InputUrlOptions o{cfg.input_urls_allow_private, cfg.input_urls_ca_file,
                                 job.input_max_size, cfg.storage.s3_timeout};
      input = storage::open_input_url(cfg.storage, o, job.input_url, control.token());
    } else {
      // A dropped connection mid-way is resumed from where it stopped, unseen by the model.
      // Storage away for longer is waited for, up to relay.storage_retry_timeout.
      input = std::make_unique<storage::ResumingSource>(
          storage, job.input_key, control.token(), 0, std::nullopt,
          storage::Persistence{.attempts = storage::ResumingSource::kAttempts,
                               .patience = cfg.storage_retry_timeout});
    }
    download_ms += ms_since(t_open);
    TimedSource downloaded(*input);
    // Encrypted inputs are decrypted as they stream; the first segment is verified before the
    // model is even contacted, so a wrong key, a wrong job binding or a damaged start never
    // reaches it. A segment that fails later aborts the request mid-body (the model sees the
    // connection drop, never a complete request).
    std::optional<std::uint64_t> plain_size = job.input_size;
    if (!job.input_url.empty()) plain_size = input->size();  // as the source says, if it does
    std::unique_ptr<crypto::DecryptingSource> decrypting;
    std::unique_ptr<crypto::PrimedSource> primed;
    ByteSource* plaintext = &downloaded;
    auto t_decrypt = Clock::now();
    if (key && job.input_url.empty()) {
      decrypting = std::make_unique<crypto::DecryptingSource>(
          downloaded, *key, crypto::input_aad(job.id), enc.params);
      primed = std::make_unique<crypto::PrimedSource>(*decrypting, plain_size);
      plaintext = primed.get();
    }
    double prime_ms = ms_since(t_decrypt);
    TimedSource timed(*plaintext);

    stage = Stage::inference;
    InferenceRequest req;
    req.path = route->second;
    req.filename = job.input_filename;
    req.content_type = job.input_content_type;
    req.body = &timed;
    req.params = std::move(params);
    req.timeout = cfg.inference.timeout;
    req.max_answer_size = static_cast<std::uint64_t>(cfg.max_result_size);
    if (!progress_url.empty()) req.headers.emplace_back("Relay-Progress-URL", progress_url);
    req.while_model_works = std::move(while_model_works);
    // The job's trace goes on to the model: the same trace, this request as its parent.
    if (auto trace = parse_traceparent(job.traceparent)) {
      req.headers.emplace_back("traceparent", child_of(*trace).header());
      if (!job.tracestate.empty()) req.headers.emplace_back("tracestate", job.tracestate);
    }
    auto t_post = Clock::now();
    InferenceResponse resp = inference.post(req, control.token());
    // timed: everything spent pulling the input (download + decryption); downloaded: the
    // storage part of it.
    download_ms += downloaded.spent_ms();
    timings.set("download", download_ms);
    if (key)
      timings.set("decrypt", std::max(0.0, timed.spent_ms() + prime_ms - downloaded.spent_ms()));
    timings.set("inference", ms_since(t_post) - timed.spent_ms());
    if (resp.status == 200) return Answer{std::move(resp), std::move(timings), start};
    std::string head = resp.body.head(512);
    result = failed("inference_failed", "inference returned HTTP " + std::to_string(resp.status) +
                                            (head.empty() ? "" : ": " + head));
    result.http_status = resp.status;
    std::int64_t secs = 0;
    const auto& ra = resp.retry_after;
    auto [end, ec] = std::from_chars(ra.data(), ra.data() + ra.size(), secs);
    if (ec == std::errc() && end == ra.data() + ra.size() && secs >= 0)
      result.retry_after = std::chrono::seconds(secs);
  } catch (...) {
    result = failure_of(std::current_exception(), stage, job, control);
  }
  return finished(std::move(result), control, job, std::move(timings), start, download_ms);
}

JobResult store_answer(storage::Storage& storage, const crypto::Encryption& enc,
                       const JobRecord& job, JobControl& control, Answer answer,
                       std::chrono::milliseconds patience) {
  JobResult result;
  try {
    // (run_model() found the key: the keyring does not change while the relay runs.)
    std::optional<std::string> key;
    if (!job.key_id.empty()) key = enc.keyring.get(job.key_id);
    auto t_up = Clock::now();
    std::string result_key = result_object_key(job.service_type, job.id);
    // The answer is in the spool: a storage blip (unreachable, 5xx, a reset), or an outage up to
    // `patience`, is retried here rather than fail the job and cost the model's work again.
    // (The same loop as the input's reads, each try the whole result again from the spool.)
    Backoff backoff(std::chrono::milliseconds(500), std::chrono::seconds(4));
    storage::resume_after_failures(
        [&] {
          auto body = answer.response.body.reader();
          if (key) {
            // The result is sealed with the job's key, bound to "<id>/result.json".
            crypto::EncryptingSource sealed(*body, *key, crypto::result_aad(job.id), enc.params);
            storage.put(result_key, sealed, control.token());
          } else {
            storage.put(result_key, *body, control.token());
          }
        },
        storage::Persistence{.attempts = kUploadAttempts, .patience = patience}, backoff,
        control.token(), [] { return true; },
        [&](const storage::StorageError& e, int failures) {
          if (failures < kUploadAttempts || failures % 10 == 0)  // (an outage: every tenth)
            log::warn("result upload failed; retrying",
                      {{"job_id", job.id}, {"attempt", failures}, {"error", e.what()}});
        });
    answer.timings.set("upload", ms_since(t_up));
    result.disposition = Disposition::completed;
    result.result_key = result_key;
    // Served back as the model said (a model answering text/plain is not passed off as JSON).
    result.result_content_type = utf8_clean(answer.response.content_type, 255);
  } catch (...) {
    result = failure_of(std::current_exception(), Stage::upload, job, control);
  }
  return finished(std::move(result), control, job, std::move(answer.timings), answer.start, 0);
}

}  // namespace relay::sidecar
