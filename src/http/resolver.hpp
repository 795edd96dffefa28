#pragma once
// Host name lookups that a slow or hostile name server cannot turn into stuck threads.
//
// getaddrinfo(3) takes no deadline and cannot be cancelled: behind a name server that does not
// answer it returns after the system resolver's retries (10 s and more). Where a client names
// the host — a callback_url, an input_url — it would choose how long a request thread waits,
// and a few such requests at once would hold every request thread (issue 10's class). Here:
// - lookups run on a few threads of their own (`lookups`; more names queue), never on the
//   caller's, and a caller's stop token ends its wait (a shutdown, a cancelled job);
// - a caller waits at most `timeout`, then has its answer: `unavailable`; a queued name nobody
//   waits for any more is dropped, not looked up;
// - a name whose lookup outlived a caller's wait is not waited on again while it runs on, and
//   answers are kept (`ttl`, `negative_ttl`), so a slow name costs one lookup, not one per
//   request;
// - with `max_waiting` callers waiting already, one more is `unavailable` at once.
// So a caller waits at most `timeout`, and only callers needing a name not yet known can be
// slowed by slow names (a burst of new names queues briefly behind the lookup threads).
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

namespace relay::http {

struct Resolution {
  enum class Outcome {
    ok,           // addresses (numeric) holds what the name resolved to
    not_found,    // the name does not exist or has no address: it will not do
    unavailable,  // no answer now (timed out, too many lookups, a failing name server): retry
  };
  Outcome outcome = Outcome::not_found;
  std::vector<std::string> addresses;
  std::string why;  // unless ok, for messages: "did not resolve within 2s", ...
};

class Resolver {
 public:
  struct Options {
    std::chrono::milliseconds timeout{2000};
    std::size_t lookups = 4;      // lookups running at once (a thread each, started on demand)
    std::size_t max_waiting = 8;  // callers waiting at once
    std::chrono::milliseconds ttl{30'000};          // an answer with addresses is kept this long
    std::chrono::milliseconds negative_ttl{5'000};  // ... one without
    std::size_t max_entries = 4096;                 // names kept
  };
  // The lookup itself: getaddrinfo by default (tests pass a slow one).
  using Lookup = std::function<Resolution(const std::string& host)>;

  explicit Resolver(Options options, Lookup lookup = system_lookup);
  // Does not wait for lookups in progress (a stuck getaddrinfo would hold the exit): their
  // threads finish on their own, on state they share.
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // A numeric address answers at once, without a lookup. A stop request ends the wait
  // (`unavailable`).
  Resolution resolve(const std::string& host, std::stop_token stop = {});

  // getaddrinfo, blocking, as long as the system resolver takes.
  static Resolution system_lookup(const std::string& host);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace relay::http
