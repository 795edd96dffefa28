#pragma once
// The gateway's HTTP API as request -> response (SPEC §2), free of sockets: the server
// (http_server.cpp) parses HTTP and runs handle() on its blocking pool, because handlers call
// Redis and storage synchronously. Long-polls come back as a "wait" response: the server waits
// for the job's completion notice asynchronously, then asks again.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crypto/keyring.hpp"
#include "gateway/config.hpp"
#include "gateway/job_json.hpp"
#include "redis/job_record.hpp"
#include "storage/storage.hpp"

namespace relay::gateway {

struct Request {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // path and query, as received
  std::function<std::string(std::string_view name)> header;  // "" when absent
  ByteSource* body = nullptr;                                // the request body, read as it arrives
  std::optional<std::uint64_t> content_length;
};

struct Response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::unique_ptr<ByteSource> stream;  // sent instead of body (result downloads)
  std::string route = "unknown";       // metrics label, e.g. "GET /jobs/{service_type}/{id}"
  // Long-poll: wait for this job's completion notice until wait_until, then ask again with the
  // same request (and wait_until in the past).
  std::string wait_job;
  std::chrono::steady_clock::time_point wait_until{};
  bool close = false;  // the request body was not read to its end: close the connection
};

Response error_response(unsigned status, const std::string& code, const std::string& message);

class Api {
 public:
  Api(const Config& config, storage::Storage& storage, const crypto::Encryption& encryption);
  // Blocking. `deadline_passed` is true when a long-poll's wait ended: answer whatever the state.
  Response handle(const Request& req, bool deadline_passed = false);
  // The answers that need neither Redis nor storage (liveness, the API document), given at once
  // on the I/O thread: they never queue behind uploads on the blocking pool. nullopt otherwise.
  static std::optional<Response> answer_at_once(const Request& req);

 private:
  struct Context;
  Response route(const Request& req, Context& ctx, bool deadline_passed);
  template <typename F>
  auto step(Context& ctx, F&& f, const std::function<void(int)>& on_retry = {});
  Response submit(const Request& req, Context& ctx, const std::string& service_type);
  Response get_job(const Request& req, Context& ctx, const std::string& service_type,
                   const std::string& id, bool deadline_passed);
  Response get_result(Context& ctx, const std::string& service_type, const std::string& id);
  Response cancel(Context& ctx, const std::string& service_type, const std::string& id);
  Response ready();
  Response metrics_text();
  std::optional<std::string> tenant_of(const Request& req) const;

  const Config& cfg_;
  storage::Storage& storage_;
  const crypto::Encryption& enc_;
  redis::Endpoint endpoint_;  // parsed once: handle() runs per request
  redis::Keys keys_;
};

}  // namespace relay::gateway
