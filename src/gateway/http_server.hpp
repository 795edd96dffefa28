#pragma once
// The gateway's HTTP server: Boost.Beast with C++20 coroutines on one I/O thread, which owns
// every socket — thousands of idle long-polls and slow uploads cost a coroutine frame each.
// Handlers (Redis, storage) run on a request pool (server.blocking_threads); received upload
// bytes are stored on an upload pool (server.upload_threads); neither ever waits on a client.

#include <memory>
#include <string>

#include "gateway/api.hpp"
#include "gateway/config.hpp"
#include "gateway/notifier.hpp"

namespace relay::gateway {

// The open-file limit is raised to its hard limit; connections get what it leaves after a reserve
// for the rest of the process: per pool thread a Redis connection (one per master in cluster
// mode) and a storage file or socket, plus the background loops and webhook deliveries.
// `configured` (server.max_connections, 0 = fit) is lowered to that. Returns {budget, limit}.
std::pair<long, long> connection_budget(long configured, long pool_threads);

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
  // Connections this server accepts at most: server.max_connections, or what the open-file
  // limit leaves (see connection_budget).
  long max_connections() const;
  // Thread-safe: stop accepting, wake long-polls so they answer now, finish in-flight requests.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::gateway
