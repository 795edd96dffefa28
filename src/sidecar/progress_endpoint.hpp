#pragma once
// The channel a model reports progress through, with no Redis client in the model: a small HTTP
// endpoint of the relay on loopback. For each job the relay sends the model the URL to report
// to in the `Relay-Progress-URL` request header:
//
//   POST http://127.0.0.1:<port>/progress/<secret>
//   {"progress": 0.25, "message": "page 1 of 4"}      (either member may be left out)
//
// answered 204 while the job runs, 404 once it ended (stop reporting), 400 for a body that is
// not such an object, 413 over 4 KiB. The secret is random per job, so a report can only ever
// reach the job it was given for. A relay running several jobs at once (relay.concurrency) has
// one URL open per job. The relay throttles what it records (Heartbeat).
//
// The relay's second translation unit with Boost.Beast: one I/O thread, coroutines.

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace relay::sidecar {

struct ProgressReport {
  std::optional<double> fraction;  // in [0, 1]
  std::string message;             // valid UTF-8, at most 256 bytes
};

// The report's checks, apart from HTTP: the report, or why the body is not one.
std::optional<ProgressReport> parse_progress(std::string_view body, std::string* why);

class ProgressEndpoint {
 public:
  using Sink = std::function<void(ProgressReport)>;  // called on the endpoint's thread
  // Listens on `listen` ("host:port", port 0: any free one); throws std::runtime_error.
  explicit ProgressEndpoint(const std::string& listen);
  ~ProgressEndpoint();
  ProgressEndpoint(const ProgressEndpoint&) = delete;
  ProgressEndpoint& operator=(const ProgressEndpoint&) = delete;

  // A new URL for a job in hand; its reports go to sink until close(url).
  std::string open(Sink sink);
  // After it returns, no report is being handed to that URL's sink, and the URL answers 404.
  void close(const std::string& url);
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::sidecar
