// The only translation unit of the gateway that includes Boost.Beast.
#include "gateway/http_server.hpp"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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
constexpr auto kUploadIdle =
    std::chrono::seconds(60);  // an upload that stalls this long is dropped

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
             http::request_parser<http::buffer_body>& parser, std::atomic<Clock::rep>& activity)
      : sock_(sock), buf_(buf), parser_(parser), activity_(activity) {}
  size_t read(std::span<char> out) override {
    while (!parser_.is_done()) {
      parser_.get().body().data = out.data();
      parser_.get().body().size = out.size();
      beast::error_code ec;
      http::read(sock_, buf_, parser_, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw std::runtime_error("reading the request body: " + ec.message());
      activity_.store(Clock::now().time_since_epoch().count());
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
  std::atomic<Clock::rep>& activity_;
};

}  // namespace

struct HttpServer::Impl {
  const Config& cfg;
  Api& api;
  Notifier& notifier;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::thread_pool pool;
  std::atomic<long> connections{0};
  std::atomic<bool> stopping{false};

  Impl(const Config& c, Api& a, Notifier& n)
      : cfg(c), api(a), notifier(n), pool(static_cast<std::size_t>(c.blocking_threads)) {}

  void drain(Clock::time_point deadline) {
    if (connections.load() == 0 || Clock::now() >= deadline) {
      io.stop();
      return;
    }
    auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
    t->async_wait([this, t, deadline](beast::error_code) { drain(deadline); });
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      tcp::socket sock = co_await acceptor.async_accept(asio::use_awaitable);
      if (connections.load() >= cfg.max_connections) {
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
      std::atomic<Clock::rep> activity{Clock::now().time_since_epoch().count()};
      BodySource body(stream.socket(), buffer, parser, activity);
      if (has_body && req.method() == http::verb::post) r.body = &body;

      // An upload that stalls is dropped: the watchdog shuts the socket under the reader.
      auto watchdog = std::make_shared<asio::steady_timer>(io);
      int fd = stream.socket().native_handle();
      if (r.body) arm_watchdog(watchdog, fd, activity);
      Response resp = co_await run_blocking(pool, [&] { return api.handle(r); });
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
        co_return;
      }
    }
  }

  void arm_watchdog(std::shared_ptr<asio::steady_timer> t, int fd,
                    std::atomic<Clock::rep>& activity) {
    t->expires_after(std::chrono::seconds(5));
    t->async_wait([this, t, fd, &activity](beast::error_code ec) {
      if (ec) return;  // cancelled: the request is done
      auto last = Clock::time_point(Clock::duration(activity.load()));
      if (Clock::now() - last > kUploadIdle) {
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
      arm_watchdog(t, fd, activity);
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
    stream.expires_after(std::chrono::seconds(60));
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

void HttpServer::run() {
  asio::co_spawn(impl_->io, impl_->accept_loop(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::debug("accept loop ended", {{"error", ex.what()}});
    }
  });
  impl_->io.run();
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
