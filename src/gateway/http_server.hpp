#pragma once
// The gateway's HTTP server: Boost.Beast with C++20 coroutines on one I/O thread, which owns
// every socket — thousands of idle long-polls and slow uploads cost a coroutine frame each.
// Handlers run on the pool of what they wait for: Redis on a request pool
// (server.blocking_threads), storage (submissions' bytes, results' downloads) on a storage pool
// (server.upload_threads), readiness and metrics on two threads of their own; none ever waits
// on a client.

#include <memory>
#include <string>

#include "gateway/api.hpp"
#include "gateway/config.hpp"
#include "gateway/connection_budget.hpp"
#include "gateway/notifier.hpp"

namespace relay::gateway {

class HttpServer {
 public:
  HttpServer(const Config& config, Api& api, Notifier& notifier);
  ~HttpServer();
  // Binds; throws std::runtime_error naming the address when it cannot.
  void listen();
  // Serves until stop(); returns after in-flight requests finished or the drain deadline passed:
  // true then, false if serving failed (the accept loop ended on its own: the process should
  // exit non-zero).
  bool run();
  // Connections this server accepts at most, and what bounds them (connection_budget.hpp).
  const ConnectionBudget& connection_budget() const;
  // Thread-safe: stop accepting, wake long-polls so they answer now, finish in-flight requests.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::gateway
