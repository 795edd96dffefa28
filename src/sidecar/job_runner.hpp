#pragma once
// One job's pipeline (seed, "Job lifecycle" §3): stream the input from storage into a multipart
// POST to the inference server, store the answer as result.json. Pure of Redis: the caller
// takes the lease before and writes the outcome after, so the pipeline is testable alone.

#include <boost/json/object.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "crypto/keyring.hpp"
#include "redis/job_record.hpp"
#include "sidecar/config.hpp"
#include "sidecar/inference_client.hpp"
#include "sidecar/job_control.hpp"
#include "storage/storage.hpp"

namespace relay::sidecar {

// Milliseconds per stage, in the order measured: queue_wait, download, inference, upload, total.
class Timings {
 public:
  void set(std::string_view stage, double ms);
  bool has(std::string_view stage) const;
  // {"queue_wait":12.345,...} — fixed three decimals, for humans and for jq alike.
  std::string json() const;
  // {"queue_wait":12345,...}: integer microseconds, for log lines (no float formatting).
  boost::json::object micros() const;

 private:
  std::vector<std::pair<std::string, double>> stages_;
};

enum class Disposition {
  completed,
  failed,
  cancelled,
  abandoned,   // lease lost: write nothing, another relay may own the job now
  given_back,  // shutdown: put the job back at the front of pending
  model_away,  // the model could not be reached at all: the job back at the front of pending,
               // and the relay waits for the model's health before it takes another
};

struct JobResult {
  Disposition disposition = Disposition::failed;
  std::string error_code;            // when failed
  std::string error_message;         // when failed
  std::string result_key;            // when completed
  std::string result_content_type;   // when completed: the model's, for GET .../result
  long http_status = 0;              // when the model answered with an error
  bool storage_unavailable = false;  // failed on storage that a later attempt may find back
  std::optional<std::chrono::milliseconds> retry_after;  // the model's Retry-After
  Timings timings;                                       // milliseconds per stage
};

// An input read ahead of its job, whole and in memory, while the model ran the job before it
// (relay.take_ahead): the model's next request does not wait for storage.
struct PrefetchedInput {
  std::string job_id;
  std::string bytes;  // as stored (sealed, when the job is encrypted)
  double ms = 0;      // how long reading it took (the job's download time)
};

// The model's 200 answer to a job, its result not stored yet: run_model() ends there, and
// store_answer() stores it — which the relay does while the model works on the next job, so
// that storing a result is off the model's path too.
struct Answer {
  InferenceResponse response;
  Timings timings;
  std::chrono::steady_clock::time_point start;
};

// A job's pipeline in two halves. run_model(): up to the model's answer — the job's result when
// it ends there (a failure, a cancel...), else the answer. progress_url: sent to the model as
// Relay-Progress-URL (empty: not sent); while_model_works: the caller's work while the model
// works (InferenceRequest::while_model_works); input: the job's input read already (used when it
// names this job; null or another job's: read now). store_answer(): the answer stored, tried
// again while storage is unavailable, for `patience` at least (relay.storage_retry_timeout).
std::variant<JobResult, Answer> run_model(const Config& config, storage::Storage& storage,
                                          InferenceClient& inference,
                                          const crypto::Encryption& encryption,
                                          const JobRecord& job, JobControl& control,
                                          const std::string& progress_url = {},
                                          ModelAtWork while_model_works = {},
                                          const PrefetchedInput* input = nullptr);
JobResult store_answer(storage::Storage& storage, const crypto::Encryption& encryption,
                       const JobRecord& job, JobControl& control, Answer answer,
                       std::chrono::milliseconds patience);

// Reads a job's stored input whole into memory when it is at most max_bytes as stored (sealed,
// when encrypted: the caller allows for the format's overhead); an input by reference, or a
// larger one, is left to be read as the job runs: nothing. Never throws: a failure here leaves
// the read to run_model(), which reports it as it would have. buffer: the last one's, for its
// memory.
std::optional<PrefetchedInput> prefetch_input(storage::Storage& storage, const JobRecord& job,
                                              std::size_t max_bytes, std::stop_token stop,
                                              std::string buffer = {});

}  // namespace relay::sidecar
