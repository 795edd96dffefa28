#pragma once
// The gateway's HTTP server: Boost.Beast with C++20 coroutines on one I/O thread, so that
// thousands of idle long-polls cost a coroutine frame each; handlers (Redis, storage, uploads)
// run on a blocking pool (server.blocking_threads) and never stall the I/O thread.

#include <memory>
#include <string>

#include "gateway/api.hpp"
#include "gateway/config.hpp"
#include "gateway/notifier.hpp"

namespace relay::gateway {

class HttpServer {
 public:
  HttpServer(const Config& config, Api& api, Notifier& notifier);
  ~HttpServer();
  // Binds; throws std::runtime_error naming the address when it cannot.
  void listen();
  // Serves until stop(); returns after in-flight requests finished or the drain deadline passed.
  void run();
  // Thread-safe: stop accepting, wake long-polls so they answer now, finish in-flight requests.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::gateway
