#pragma once
// The relay's client for the local inference server: the health probe and the multipart POST
// that streams the job's input (SPEC §5). Boost.Beast over one keep-alive connection, reused
// across jobs: the server is on loopback, a new connection per job would be pure overhead.
//
// Cancellation: a stop request shuts the socket down from the requesting thread, so a blocked
// read or write fails at once and the server sees the connection drop.

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "common/alarm_clock.hpp"
#include "common/byte_stream.hpp"
#include "sidecar/spool.hpp"

namespace relay::sidecar {

// The request could not be completed (as opposed to a non-200 answer, which is a response).
class InferenceError : public std::runtime_error {
 public:
  InferenceError(std::string code, const std::string& what, bool reached = true)
      : std::runtime_error(what), code_(std::move(code)), reached_(reached) {}
  const std::string& code() const { return code_; }  // inference_unreachable, inference_timeout
  // False when nothing reached the model: its address did not resolve, or the connection was
  // refused (a model server restarting). The job is not the model's failure then.
  bool reached() const { return reached_; }

 private:
  std::string code_;
  bool reached_;
};

// Called by post() while the model works on a request. Neither may throw.
struct ModelAtWork {
  // Once the whole request is sent, before its answer is read (not when sending failed).
  // Returns when to call `late` if the answer has not begun by then (nothing: never).
  std::function<std::optional<std::chrono::steady_clock::time_point>()> sent = {};
  // Once, at that time, the answer not begun: the model is taking longer than the caller hoped.
  std::function<void()> late = {};
};

struct InferenceRequest {
  std::string path;  // the route, e.g. "/predict"
  std::string filename;
  std::string content_type;
  ByteSource* body = nullptr;
  // Form fields beside "file": each params member, its value as the client wrote it.
  std::vector<std::pair<std::string, std::string>> params = {};
  std::chrono::milliseconds timeout{0};  // 0 = none
  std::uint64_t max_answer_size = 0;     // a longer answer body: InferenceError result_too_large
  std::vector<std::pair<std::string, std::string>> headers = {};  // sent as they are
  // Work of the caller's that overlaps the model's, on the thread in post() (relay.take_ahead).
  ModelAtWork while_model_works = {};
};

struct InferenceResponse {
  long status = 0;
  Spool body;
  std::string content_type = {};  // the answer's Content-Type, as the model sent it
  std::string retry_after = {};   // its Retry-After, if any (delta-seconds are honoured)
};

class InferenceClient {
 public:
  // base_url: http://host:port (no TLS: the server is local); spool_dir: where answers over
  // Spool::kMemoryLimit are kept (empty = $TMPDIR or /tmp); alarms: the clock that times
  // requests out, shared with the caller's other deadlines (none: the client's own). Throws
  // std::invalid_argument.
  explicit InferenceClient(const std::string& base_url, std::string spool_dir = {},
                           AlarmClock* alarms = nullptr);
  ~InferenceClient();

  // GET path; the HTTP status, or 0 when nothing answered within timeout.
  long probe(const std::string& path, std::chrono::milliseconds timeout, std::stop_token stop);

  // POSTs multipart/form-data: a "file" part streamed from request.body (with its filename and
  // content type) and one field per params key (strings as they are, other values as JSON).
  // Throws InferenceError, relay::Aborted when stop is requested, or whatever request.body's
  // read throws (the connection is then dropped, so the server never sees a complete request).
  InferenceResponse post(const InferenceRequest& request, std::stop_token stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::sidecar
