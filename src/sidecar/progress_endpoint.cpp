#include "sidecar/progress_endpoint.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/random.hpp"
#include "common/thread_name.hpp"
#include "common/utf8.hpp"
#include "config/shared.hpp"

namespace relay::sidecar {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxBody = 4096;
constexpr std::size_t kMaxMessage = 256;
constexpr std::string_view kPath = "/progress/";

}  // namespace

std::optional<ProgressReport> parse_progress(std::string_view body, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<ProgressReport> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return fail("expected a JSON object");
  const auto& o = v.as_object();
  ProgressReport r;
  bool any = false;
  if (auto* p = o.if_contains("progress"); p && !p->is_null()) {
    if (!p->is_number()) return fail("progress must be a number from 0 to 1");
    const double f = p->to_number<double>();
    if (!(f >= 0.0 && f <= 1.0)) return fail("progress must be a number from 0 to 1");
    r.fraction = f;
    any = true;
  }
  if (auto* m = o.if_contains("message"); m && !m->is_null()) {
    if (!m->is_string()) return fail("message must be a string");
    r.message = utf8_clean(std::string_view(m->as_string()), kMaxMessage);
    any = true;
  }
  if (!any) return fail("give progress (0 to 1), message, or both");
  return r;
}

struct ProgressEndpoint::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::jthread thread;
  std::mutex mu;                                // guards sinks, and is held while a sink runs
  std::unordered_map<std::string, Sink> sinks;  // by secret: one per job in hand
  std::string base_url;                         // http://host:port/progress/
  int port = 0;

  http::response<http::string_body> answer(const http::request<http::string_body>& req) {
    auto reply = [&](http::status st, std::string error) {
      http::response<http::string_body> res{st, req.version()};
      if (!error.empty()) {
        res.set(http::field::content_type, "application/json");
        res.body() = "{\"error\":\"" + error + "\"}";
      }
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      return res;
    };
    const std::string_view target = req.target();
    if (!target.starts_with(kPath)) return reply(http::status::not_found, "no such route");
    if (req.method() != http::verb::post)
      return reply(http::status::method_not_allowed, "use POST");
    std::string why;
    auto report = parse_progress(req.body(), &why);
    std::lock_guard lock(mu);
    auto it = sinks.find(std::string(target.substr(kPath.size())));
    if (it == sinks.end())
      return reply(http::status::not_found, "no job in progress at this URL (it ended)");
    if (!report) return reply(http::status::bad_request, why);
    it->second(std::move(*report));
    return reply(http::status::no_content, "");
  }

  asio::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxBody);
      stream.expires_after(std::chrono::seconds(30));
      beast::error_code ec;
      co_await http::async_read(stream, buffer, parser,
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::body_limit) {
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = "{\"error\":\"a progress report is at most 4 KiB\"}";
        res.keep_alive(false);
        res.prepare_payload();
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        co_return;
      }
      if (ec) co_return;  // closed, timed out, or not HTTP
      auto res = answer(parser.get());
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !res.keep_alive()) co_return;
    }
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      beast::error_code ec;
      tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) continue;  // out of descriptors, say: the model retries its report
      asio::co_spawn(io, session(std::move(s)), asio::detached);
    }
  }
};

ProgressEndpoint::ProgressEndpoint(const std::string& listen) : impl_(std::make_unique<Impl>()) {
  try {
    const auto a = config::listen_address("relay.progress_listen", listen);
    tcp::endpoint ep(asio::ip::make_address(a.ip), a.port);
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen();
    const auto bound = impl_->acceptor.local_endpoint();
    impl_->port = bound.port();
    std::string h = bound.address().is_unspecified() ? "127.0.0.1" : bound.address().to_string();
    if (bound.address().is_v6() && !bound.address().is_unspecified()) h = "[" + h + "]";
    impl_->base_url = "http://" + h + ":" + std::to_string(impl_->port) + std::string(kPath);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + listen + " for progress reports: " + e.what());
  }
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::jthread([this] {
    name_this_thread("progress");
    impl_->io.run();
  });
}

ProgressEndpoint::~ProgressEndpoint() {
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->io.stop();
  });
  impl_->thread.join();
}

std::string ProgressEndpoint::open(Sink sink) {
  std::string secret = random_hex(16);
  std::lock_guard lock(impl_->mu);
  impl_->sinks[secret] = std::move(sink);
  return impl_->base_url + secret;
}

void ProgressEndpoint::close(const std::string& url) {
  if (!url.starts_with(impl_->base_url)) return;
  std::lock_guard lock(impl_->mu);
  impl_->sinks.erase(url.substr(impl_->base_url.size()));
}

int ProgressEndpoint::port() const {
  return impl_->port;
}

}  // namespace relay::sidecar
