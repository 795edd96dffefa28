// The only translation unit of the gateway that includes Boost.Beast.
#include "gateway/http_server.hpp"

#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <set>

#include "common/log.hpp"
#include "gateway/metrics.hpp"

namespace relay::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr auto kHeaderTimeout = std::chrono::seconds(60);  // idle keep-alive and slow headers

// An upload's progress, written by the reading pool thread, watched by the I/O thread.
struct Progress {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<Clock::rep> last{Clock::now().time_since_epoch().count()};
  void add(std::size_t n) {
    if (n == 0) return;
    bytes += n;
    last.store(Clock::now().time_since_epoch().count());
  }
};

// Runs f on the blocking pool; the coroutine resumes on its own executor afterwards.
template <typename F>
asio::awaitable<std::invoke_result_t<F&>> run_blocking(asio::thread_pool& pool, F f) {
  using R = std::invoke_result_t<F&>;
  co_return co_await asio::co_spawn(
      pool, [&f]() -> asio::awaitable<R> { co_return f(); }, asio::use_awaitable);
}

// The request body, read synchronously from the socket by a pool thread while the session
// coroutine waits (nothing else touches the socket then).
class BodySource final : public ByteSource {
 public:
  BodySource(tcp::socket& sock, beast::flat_buffer& buf,
             http::request_parser<http::buffer_body>& parser, Progress& progress,
             bool expect_continue)
      : sock_(sock),
        buf_(buf),
        parser_(parser),
        progress_(progress),
        expect_continue_(expect_continue) {}
  // One socket read at a time (read_some), so that progress is counted in bytes as they come,
  // not in filled buffers: a slow but steady client is not mistaken for a stalled one.
  size_t read(std::span<char> out) override {
    if (expect_continue_) {
      // The handler reads the body only once it accepted the request (auth, route, declared
      // size): that is when a client waiting on `Expect: 100-continue` is told to send it.
      expect_continue_ = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      beast::error_code ec;
      asio::write(sock_, asio::buffer(kContinue.data(), kContinue.size()), ec);
      if (ec) throw std::runtime_error("sending 100 Continue: " + ec.message());
    }
    while (!parser_.is_done()) {
      parser_.get().body().data = out.data();
      parser_.get().body().size = out.size();
      beast::error_code ec;
      size_t got = http::read_some(sock_, buf_, parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw std::runtime_error("reading the request body: " + ec.message());
      progress_.add(got);
      size_t n = out.size() - parser_.get().body().size;
      if (n > 0) return n;
    }
    return 0;
  }
  std::optional<std::uint64_t> size() const override {
    if (auto n = parser_.content_length()) return *n;
    return std::nullopt;
  }

 private:
  tcp::socket& sock_;
  beast::flat_buffer& buf_;
  http::request_parser<http::buffer_body>& parser_;
  Progress& progress_;
  bool expect_continue_;
};

}  // namespace

std::pair<long, long> connection_budget(long configured, long blocking_threads) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur != rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const long limit = rl.rlim_cur == RLIM_INFINITY
                         ? (1L << 20)
                         : static_cast<long>(std::min<rlim_t>(rl.rlim_cur, 1L << 30));
  const long reserve = 64 + 8 * blocking_threads;
  const long fit = std::max(1L, limit - reserve);
  return {configured > 0 ? std::min(configured, fit) : fit, limit};
}

struct HttpServer::Impl {
  const Config& cfg;
  Api& api;
  Notifier& notifier;
  // Sockets of live sessions, so that shutdown can cut what is still running at its deadline
  // (a pool thread blocked reading a stalled upload included). Declared before io: sessions
  // that io destroys unfinished unregister themselves on the way out.
  std::mutex sockets_mu;
  std::set<int> sockets;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::thread_pool pool;
  std::atomic<long> connections{0};
  std::atomic<bool> stopping{false};
  bool failed = false;  // the accept loop ended without stop()
  long max_connections = 0;

  Impl(const Config& c, Api& a, Notifier& n)
      : cfg(c), api(a), notifier(n), pool(static_cast<std::size_t>(c.blocking_threads)) {
    auto [budget, limit] = connection_budget(c.max_connections, c.blocking_threads);
    max_connections = budget;
    if (c.max_connections > budget)
      log::warn(
          "server.max_connections lowered to fit the open-file limit",
          {{"configured", c.max_connections}, {"max_connections", budget}, {"open_files", limit}});
  }

  void drain(Clock::time_point deadline) {
    if (connections.load() == 0) {
      io.stop();
      return;
    }
    if (Clock::now() >= deadline) {
      std::lock_guard lock(sockets_mu);
      log::warn("shutdown deadline passed; cutting the connections still open",
                {{"connections", static_cast<std::int64_t>(sockets.size())}});
      for (int fd : sockets) ::shutdown(fd, SHUT_RDWR);
      io.stop();
      return;
    }
    auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
    t->async_wait([this, t, deadline](beast::error_code) { drain(deadline); });
  }

  asio::awaitable<void> accept_loop() {
    asio::steady_timer pause(io);
    auto last_warning = Clock::time_point{};
    for (;;) {
      beast::error_code ec;
      tcp::socket sock =
          co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (stopping.load()) co_return;
        // Out of descriptors (EMFILE, ENFILE) or kernel memory: new connections wait in the
        // listen backlog while this pauses; closing connections make room. Never fatal.
        if (Clock::now() - last_warning > std::chrono::seconds(10)) {
          log::warn("cannot accept connections; pausing", {{"error", ec.message()},
                                                           {"connections", connections.load()},
                                                           {"max_connections", max_connections}});
          last_warning = Clock::now();
        }
        pause.expires_after(std::chrono::milliseconds(100));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      if (connections.load() >= max_connections) {
        beast::error_code ec;
        sock.close(ec);  // over the limit: refuse at once rather than queue
        continue;
      }
      asio::co_spawn(io, session(std::move(sock)), [this](std::exception_ptr e) {
        --connections;
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const beast::system_error& se) {
          // Peers closing, timeouts and malformed HTTP end a session; that is not news.
          log::debug("connection ended", {{"error", se.what()}});
        } catch (const std::exception& ex) {
          log::error("connection failed", {{"error", ex.what()}});
        }
      });
      ++connections;
    }
  }

  asio::awaitable<void> session(tcp::socket socket) {
    const int fd = socket.native_handle();
    {
      std::lock_guard lock(sockets_mu);
      sockets.insert(fd);
    }
    struct Forget {
      Impl& impl;
      int fd;
      ~Forget() {
        std::lock_guard lock(impl.sockets_mu);
        impl.sockets.erase(fd);
      }
    } forget{*this, fd};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::buffer_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_size));
      parser.body_limit(boost::none);  // the API enforces input limits (413)
      stream.expires_after(kHeaderTimeout);
      beast::error_code read_error;
      try {
        co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
      } catch (const beast::system_error& e) {
        read_error = e.code();
      }
      if (read_error) {
        if (read_error == http::error::end_of_stream || read_error == asio::error::eof) co_return;
        if (read_error == beast::error::timeout || read_error == asio::error::operation_aborted)
          co_return;
        if (read_error == asio::error::connection_reset) co_return;
        // Malformed HTTP: say so, then close.
        http::response<http::string_body> bad{http::status::bad_request, 11};
        bad.set(http::field::content_type, "application/json");
        bad.body() =
            error_response(400, "bad_request", "malformed HTTP request: " + read_error.message())
                .body;
        if (read_error == http::error::header_limit)
          bad.result(http::status::request_header_fields_too_large);
        bad.keep_alive(false);
        bad.prepare_payload();
        co_await http::async_write(stream, bad, asio::use_awaitable);
        co_return;
      }
      stream.expires_never();
      const auto started = Clock::now();
      auto& req = parser.get();
      Request r;
      r.method = std::string(req.method_string());
      r.target = std::string(req.target());
      r.header = [&req](std::string_view name) -> std::string {
        auto it = req.find(name);
        return it == req.end() ? std::string() : std::string(it->value());
      };
      if (auto n = parser.content_length()) r.content_length = *n;
      const bool has_body = !parser.is_done();
      Progress progress;
      const bool expect_continue =
          beast::iequals(req[http::field::expect], "100-continue") && has_body;
      BodySource body(stream.socket(), buffer, parser, progress, expect_continue);
      if (has_body && req.method() == http::verb::post) r.body = &body;

      // An upload that stalls or trickles is cut: the watchdog shuts the socket under the reader.
      auto watchdog = std::make_shared<asio::steady_timer>(io);
      if (r.body) arm_watchdog(watchdog, fd, progress, std::make_shared<std::deque<Sample>>());
      // (No co_await inside ?: — GCC 12 miscompiles it.)
      Response resp;
      if (auto at_once = Api::answer_at_once(r))
        resp = std::move(*at_once);
      else
        resp = co_await run_blocking(pool, [&] { return api.handle(r); });
      watchdog->cancel();

      if (!resp.wait_job.empty()) resp = co_await long_poll(r, std::move(resp));

      const bool close = resp.close || !parser.is_done() || !req.keep_alive() || stopping.load();
      co_await write(stream, resp, close);
      metrics().requests.add({resp.route, std::to_string(resp.status)});
      metrics().request_seconds.observe(
          {resp.route}, std::chrono::duration<double>(Clock::now() - started).count());
      if (close) {
        beast::error_code ec;
        stream.socket().shutdown(tcp::socket::shutdown_send, ec);
        // A client still sending a body we did not read (an early 401, 404, 413) must get to
        // read the answer: closing now would reset the connection under it ("broken pipe").
        // Half-closed, the rest is read and dropped — a bounded amount, for a bounded time.
        if (!parser.is_done()) co_await discard_rest(stream);
        co_return;
      }
    }
  }

  asio::awaitable<void> discard_rest(beast::tcp_stream& stream) {
    std::vector<char> sink(64 * 1024);
    std::size_t total = 0;
    stream.expires_after(std::chrono::seconds(5));
    while (total < (64u << 20)) {
      beast::error_code ec;
      std::size_t n = co_await stream.async_read_some(
          asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;  // the client closed (it read the answer), or the time is up
      total += n;
    }
  }

  struct Sample {
    Clock::time_point at;
    std::uint64_t bytes;
  };
  // Every second: cut an upload idle for server.body_idle_timeout, or slower than
  // server.min_upload_rate over the last half of it.
  void arm_watchdog(std::shared_ptr<asio::steady_timer> t, int fd, Progress& progress,
                    std::shared_ptr<std::deque<Sample>> samples) {
    t->expires_after(
        std::min<std::chrono::milliseconds>(std::chrono::seconds(1), cfg.body_idle_timeout / 4));
    t->async_wait([this, t, fd, &progress, samples](beast::error_code ec) {
      if (ec) return;  // cancelled: the request is done
      const auto now = Clock::now();
      const std::uint64_t bytes = progress.bytes.load();
      samples->push_back({now, bytes});
      // The rate is measured over half of body_idle_timeout (30 s by default).
      const auto window_len = cfg.body_idle_timeout / 2;
      // Keep one sample at least window_len old: the rate is then over a whole window.
      while (samples->size() > 1 && now - (*samples)[1].at >= window_len) samples->pop_front();
      const auto idle = now - Clock::time_point(Clock::duration(progress.last.load()));
      const double window = std::chrono::duration<double>(now - samples->front().at).count();
      const double rate =
          window > 0 ? static_cast<double>(bytes - samples->front().bytes) / window : 0;
      std::string why;
      if (idle > cfg.body_idle_timeout)
        why = "no byte for server.body_idle_timeout";
      else if (cfg.min_upload_rate > 0 &&
               window >= std::chrono::duration<double>(window_len).count() &&
               rate < static_cast<double>(cfg.min_upload_rate))
        why = "slower than server.min_upload_rate";
      if (!why.empty()) {
        log::warn("upload cut", {{"reason", why},
                                 {"received_bytes", bytes},
                                 {"bytes_per_s", static_cast<std::int64_t>(rate)}});
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
      arm_watchdog(t, fd, progress, samples);
    });
  }

  // Waits for the job's completion notice (or the deadline), then answers with its state.
  asio::awaitable<Response> long_poll(const Request& r, Response first) {
    auto timer = std::make_shared<asio::steady_timer>(io, first.wait_until);
    auto ex = io.get_executor();
    auto reg = notifier.watch(first.wait_job,
                              [timer, ex] { asio::post(ex, [timer] { timer->cancel(); }); });
    // Re-read after registering: the job may have ended between the first read and now.
    Response again = co_await run_blocking(pool, [&] { return api.handle(r); });
    if (again.wait_job.empty() || stopping.load()) co_return again;
    try {
      co_await timer->async_wait(asio::use_awaitable);
    } catch (const beast::system_error&) {
      // cancelled: the job ended (or the server is stopping)
    }
    co_return co_await run_blocking(pool, [&] { return api.handle(r, /*deadline_passed=*/true); });
  }

  asio::awaitable<void> write(beast::tcp_stream& stream, Response& resp, bool close) {
    stream.expires_after(cfg.body_idle_timeout);
    if (!resp.stream) {
      http::response<http::string_body> out{static_cast<http::status>(resp.status), 11};
      out.set(http::field::content_type, resp.content_type);
      for (auto& [k, v] : resp.headers) out.set(k, v);
      out.keep_alive(!close);
      out.body() = std::move(resp.body);
      out.prepare_payload();
      co_await http::async_write(stream, out, asio::use_awaitable);
      co_return;
    }
    // A stored object: streamed in chunks, read from storage on the pool.
    http::response<http::buffer_body> out{static_cast<http::status>(resp.status), 11};
    out.set(http::field::content_type, resp.content_type);
    for (auto& [k, v] : resp.headers) out.set(k, v);
    out.keep_alive(!close);
    if (auto n = resp.stream->size())
      out.content_length(*n);
    else
      out.chunked(true);
    out.body().data = nullptr;
    out.body().more = true;
    http::response_serializer<http::buffer_body> sr{out};
    co_await http::async_write_header(stream, sr, asio::use_awaitable);
    std::vector<char> chunk(64 * 1024);
    for (;;) {
      size_t n = co_await run_blocking(
          pool, [&] { return resp.stream->read(std::span<char>(chunk.data(), chunk.size())); });
      out.body().data = n ? chunk.data() : nullptr;
      out.body().size = n;
      out.body().more = n > 0;
      // No total deadline: each chunk may take its share at server.min_download_rate.
      stream.expires_after(std::max<std::chrono::milliseconds>(
          cfg.body_idle_timeout,
          std::chrono::milliseconds(static_cast<std::int64_t>(n) * 1000 / cfg.min_download_rate)));
      try {
        co_await http::async_write(stream, sr, asio::use_awaitable);
      } catch (const beast::system_error& e) {
        if (e.code() != http::error::need_buffer) throw;
      }
      if (n == 0) break;
    }
  }
};

HttpServer::HttpServer(const Config& config, Api& api, Notifier& notifier)
    : impl_(std::make_unique<Impl>(config, api, notifier)) {}

HttpServer::~HttpServer() {
  impl_->pool.join();
}

void HttpServer::listen() {
  const std::string& l = impl_->cfg.listen;
  auto colon = l.rfind(':');
  try {
    std::string host = l.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    tcp::endpoint ep(asio::ip::make_address(host),
                     static_cast<unsigned short>(std::stoi(l.substr(colon + 1))));
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen(asio::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + l + ": " + e.what());
  }
}

bool HttpServer::run() {
  asio::co_spawn(impl_->io, impl_->accept_loop(), [this](std::exception_ptr e) {
    if (impl_->stopping.load()) return;
    // Only stop() ends the accept loop; anything else is a failure the process must report.
    std::string why = "the accept loop ended";
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        why = ex.what();
      }
    }
    log::error("gateway cannot serve", {{"error", why}});
    impl_->failed = true;
    impl_->io.stop();
  });
  impl_->io.run();
  return !impl_->failed;
}

long HttpServer::max_connections() const {
  return impl_->max_connections;
}

void HttpServer::stop() {
  asio::post(impl_->io, [this] {
    impl_->stopping = true;
    beast::error_code ec;
    impl_->acceptor.close(ec);
    // Long-polls answer now; in-flight requests finish; idle keep-alive connections are cut
    // at the drain deadline. The I/O thread returns as soon as no connection is left.
    impl_->notifier.wake_all();
    impl_->drain(Clock::now() + impl_->cfg.shutdown_timeout);
  });
}

}  // namespace relay::gateway
