// The only translation unit of the relay that includes Boost.Beast.
#include "sidecar/inference_client.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "common/errors.hpp"
#include "multipart/writer.hpp"

namespace relay::sidecar {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Shuts a socket down when stop is requested or a deadline passes, from whichever thread
// notices first. shutdown(2) on a descriptor another thread blocks on is safe, and makes that
// thread's read or write fail at once.
class Interrupter {
 public:
  Interrupter(AlarmClock& alarms, int fd, std::stop_token stop, std::chrono::milliseconds timeout)
      : fd_(fd) {
    on_stop_.emplace(stop, [this] { fire(); });
    if (timeout.count() > 0)
      alarm_.emplace(alarms, AlarmClock::Clock::now() + timeout, [this] {
        timed_out_ = true;
        fire();
      });
  }
  ~Interrupter() { release(); }
  // No shutdown after this returns: call it before the socket is closed (its descriptor may be
  // another file's by the time a late alarm rings).
  void release() {
    alarm_.reset();
    on_stop_.reset();
  }
  bool timed_out() const { return timed_out_; }

 private:
  void fire() { ::shutdown(fd_, SHUT_RDWR); }
  int fd_;
  std::atomic<bool> timed_out_{false};
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
  std::optional<ScopedAlarm> alarm_;
};

// Inputs up to this size are sent with their request in one write.
constexpr std::uint64_t kOneWrite = 64 * 1024;
constexpr std::size_t kAnswerBuffer = 1 << 20;  // the read buffer's limit (see Impl::buffer)

}  // namespace

struct InferenceClient::Impl {
  std::unique_ptr<AlarmClock> own_alarms;  // when the caller has none to share
  AlarmClock* alarms = nullptr;            // request timeouts
  asio::io_context io;
  std::string host, port, host_header;
  std::string spool_dir;
  std::optional<tcp::socket> sock;
  // Bounded: an answer's header has Beast's limit, its body goes out through 64 KiB pieces, and
  // a chunk line (size, extensions) or trailer longer than this is a broken answer, not memory to
  // grow (a model server sending one without end took the relay's memory with it).
  beast::flat_buffer buffer{kAnswerBuffer};

  // Reuses the kept-alive connection unless the server has closed it meanwhile.
  tcp::socket& connected() {
    if (sock && sock->is_open()) {
      pollfd p{sock->native_handle(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 0) return *sock;  // nothing to read: still good
      drop();
    }
    tcp::resolver resolver(io);
    beast::error_code ec;
    auto results = resolver.resolve(host, port, ec);
    if (ec)
      throw InferenceError("inference_unreachable", "cannot resolve " + host + ": " + ec.message(),
                           /*reached=*/false);
    sock.emplace(io);
    asio::connect(*sock, results, ec);
    if (ec) {
      drop();
      throw InferenceError("inference_unreachable",
                           "cannot connect to " + host + ":" + port + ": " + ec.message(),
                           /*reached=*/false);
    }
    sock->set_option(tcp::no_delay(true), ec);
    buffer.clear();
    return *sock;
  }

  void drop() {
    if (sock) {
      beast::error_code ec;
      sock->close(ec);
    }
    sock.reset();
    buffer.clear();
  }
};

InferenceClient::InferenceClient(const std::string& base_url, std::string spool_dir,
                                 AlarmClock* alarms)
    : impl_(std::make_unique<Impl>()) {
  if (!alarms) {
    impl_->own_alarms = std::make_unique<AlarmClock>();
    alarms = impl_->own_alarms.get();
  }
  impl_->alarms = alarms;
  impl_->spool_dir = std::move(spool_dir);
  auto url = boost::urls::parse_uri(base_url);
  if (!url || url->scheme() != "http" || url->host().empty())
    throw std::invalid_argument("inference.url must be http://host:port");
  impl_->host = url->host();
  impl_->port = url->has_port() ? std::string(url->port()) : "80";
  impl_->host_header = std::string(url->encoded_host_and_port());
}

InferenceClient::~InferenceClient() = default;

long InferenceClient::probe(const std::string& path, std::chrono::milliseconds timeout,
                            std::stop_token stop) {
  // No watchdog thread (a one-shot relay probes once, and a thread is a good part of a
  // millisecond): the answer is read under poll() with what is left of the deadline, and fed to
  // Beast's parser as it comes — http::read would wait again on every partial header. A stop
  // shuts the socket down from the stopping thread, as for a job.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  long status = 0;
  bool keep = false;
  try {
    auto& sock = impl_->connected();
    const int fd = sock.native_handle();
    {
      std::stop_callback on_stop(stop, [fd] { ::shutdown(fd, SHUT_RDWR); });
      http::request<http::empty_body> req{http::verb::get, path, 11};
      req.set(http::field::host, impl_->host_header);
      req.set(http::field::user_agent, "relay");
      beast::error_code ec;
      http::write(sock, req, ec);  // a few bytes into an idle socket's buffer: never waits
      std::optional<http::response_parser<http::string_body>> answer;
      auto fresh = [&answer] {
        answer.emplace();
        answer->eager(true);
        answer->body_limit(64 * 1024);
      };
      fresh();
      auto& buf = impl_->buffer;
      // An interim answer (1xx) is passed over for the final one, as post() does.
      auto interim = [&answer] {
        const unsigned s = answer->get().result_int();
        return answer->is_done() && s >= 100 && s < 200 && s != 101;
      };
      while (!ec && !answer->is_done()) {
        if (buf.size() > 0) {
          buf.consume(answer->put(buf.data(), ec));
          if (ec == http::error::need_more) ec = {};
          if (!ec && interim()) {
            fresh();
            continue;
          }
          if (ec || answer->is_done()) break;
        }
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
          ec = beast::error::timeout;
          break;
        }
        auto room = buf.prepare(4096);
        const ssize_t n = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
        if (n > 0)
          buf.commit(static_cast<std::size_t>(n));
        else if (n == 0 && !answer->got_some())
          ec = http::error::end_of_stream;  // closed (or shut by a stop) before any answer
        else if (n == 0)
          answer->put_eof(ec);  // the end of a body without a length, or of a cut answer
        else if (errno != EAGAIN && errno != EINTR)
          ec = beast::error_code(errno, beast::system_category());
      }
      if (!ec && answer->is_done()) {
        status = static_cast<long>(answer->get().result_int());
        keep = answer->get().keep_alive() && status != 101;
      }
    }  // (on_stop gone: the socket can be closed below without a stop racing it)
    if (stop.stop_requested()) {
      impl_->drop();
      throw Aborted();
    }
    if (!keep) impl_->drop();
    return status;
  } catch (const InferenceError&) {
    return 0;
  }
}

namespace {
// The upload was cut short by the model (see post()).
struct CutShort {};

// Whether the model's answer begins (or the connection ends: a stop or the request's timeout
// shuts it) by `at`.
bool answer_by(int fd, std::chrono::steady_clock::time_point at) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(at - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    // (Clamped: a take_ahead of weeks must not wrap into a negative, endless wait.)
    const int n = ::poll(&p, 1,
                         static_cast<int>(std::clamp<std::int64_t>(
                             left.count(), 0, std::numeric_limits<int>::max())));
    if (n > 0) return true;
    if (n == 0 && left.count() <= 0) return false;
    if (n < 0 && errno != EINTR) return true;  // (the read that follows says what went wrong)
  }
}
}  // namespace

InferenceResponse InferenceClient::post(const InferenceRequest& r, std::stop_token stop) {
  InferenceResponse out{.status = 0, .body = Spool(impl_->spool_dir)};
  const std::string boundary = multipart::new_boundary();
  const std::string head = multipart::file_head(boundary, r.filename, r.content_type);
  std::string fields;
  for (const auto& [name, value] : r.params) fields += multipart::field(boundary, name, value);
  fields += multipart::tail(boundary);

  auto& sock = impl_->connected();
  Interrupter guard(*impl_->alarms, sock.native_handle(), stop, r.timeout);
  auto drop = [&] {
    guard.release();
    impl_->drop();
  };
  auto failed = [&](const beast::error_code& ec, const char* what) -> InferenceError {
    drop();
    if (stop.stop_requested()) throw Aborted();
    if (guard.timed_out())
      return InferenceError("inference_timeout", "inference request timed out after " +
                                                     std::to_string(r.timeout.count()) + "ms");
    return InferenceError("inference_unreachable", std::string("inference request failed while ") +
                                                       what + ": " + ec.message());
  };

  // The model may answer before it has read the whole input (a 413 from a body limit, often a
  // proxy's) and close: the upload then fails (reset, broken pipe), and the answer it sent is the
  // job's, read below like any other — "unreachable" would hide why, and be retried.
  std::optional<std::pair<beast::error_code, const char*>> cut;
  auto check_send = [&](const beast::error_code& e, const char* what) {
    if (!e) return;
    if ((e == asio::error::connection_reset || e == asio::error::broken_pipe) &&
        !stop.stop_requested() && !guard.timed_out()) {
      cut.emplace(e, what);
      throw CutShort{};
    }
    throw failed(e, what);
  };

  auto set_headers = [&](auto& req) {
    req.set(http::field::host, impl_->host_header);
    req.set(http::field::user_agent, "relay");
    req.set(http::field::content_type, "multipart/form-data; boundary=" + boundary);
    for (const auto& [name, value] : r.headers) req.set(name, value);
  };
  beast::error_code ec;
  auto size = r.body->size();
  try {
    if (size && *size <= kOneWrite) {
      // A small input (the common case for fast models) is read whole first and sent with the
      // request in one write: one syscall and one wake-up of the model instead of four.
      http::request<http::string_body> req{http::verb::post, r.path, 11};
      set_headers(req);
      std::string& body = req.body();
      body.resize(head.size() + *size + 1);  // one byte more: an input longer than recorded shows
      std::memcpy(body.data(), head.data(), head.size());
      std::uint64_t got = 0;
      while (got <= *size) {
        size_t n = r.body->read(std::span<char>(body.data() + head.size() + got, *size + 1 - got));
        if (n == 0) break;
        got += n;
      }
      if (got > *size)
        throw InferenceError("invalid_job", "the input is larger than its recorded size");
      if (got != *size)
        throw InferenceError("invalid_job", "the input is shorter than its recorded size");
      body.resize(head.size() + *size);
      body += fields;
      req.prepare_payload();
      http::write(sock, req, ec);
      check_send(ec, "sending the request");
    } else {
      http::request<http::buffer_body> req{http::verb::post, r.path, 11};
      set_headers(req);
      if (size)
        req.content_length(head.size() + *size + fields.size());
      else
        req.chunked(true);
      req.body().data = nullptr;
      req.body().more = true;
      http::request_serializer<http::buffer_body> sr{req};
      http::write_header(sock, sr, ec);
      check_send(ec, "sending the request");

      // Streams head, input, fields: one buffer at a time, whatever the input size.
      auto send = [&](const char* data, size_t n) {
        req.body().data = const_cast<char*>(data);
        req.body().size = n;
        req.body().more = true;
        http::write(sock, sr, ec);
        if (ec == http::error::need_buffer) ec = {};
        check_send(ec, "sending the input");
      };
      size_t cap = 0;
      auto buf = transfer_buffer(size, cap);
      std::uint64_t sent = 0;
      try {
        send(head.data(), head.size());
        while (size_t n = r.body->read(std::span<char>(buf.get(), cap))) {
          if (size && sent + n > *size)
            throw InferenceError("invalid_job", "the input is larger than its recorded size");
          send(buf.get(), n);
          sent += n;
        }
        if (size && sent != *size)
          throw InferenceError("invalid_job", "the input is shorter than its recorded size");
        send(fields.data(), fields.size());
        req.body().data = nullptr;
        req.body().size = 0;
        req.body().more = false;
        http::write(sock, sr, ec);
        check_send(ec, "finishing the request");
      } catch (const CutShort&) {
        throw;  // its answer is read below
      } catch (...) {
        // A half-sent request must never look complete to the server: drop the connection.
        drop();
        if (stop.stop_requested()) throw Aborted();
        throw;
      }
    }
  } catch (const CutShort&) {
    // (cut says where: what the model answered before the cut is read below)
  }
  if (!cut && r.while_model_works.sent) {
    const auto late_at = r.while_model_works.sent();
    if (late_at && r.while_model_works.late && impl_->buffer.size() == 0 &&
        !answer_by(sock.native_handle(), *late_at))
      r.while_model_works.late();
  }
  // Reading fails as the upload did when it was cut short and no answer came before the cut.
  auto read_failed = [&](const beast::error_code& e, const char* what) {
    return cut ? failed(cut->first, cut->second) : failed(e, what);
  };

  // Beast refuses a declared Content-Length over the limit with the header, and a chunked or
  // unframed body as its bytes pass it: either way the rest is not read (the connection goes).
  auto too_large = [&]() -> InferenceError {
    drop();
    return InferenceError("result_too_large", "the model's answer is larger than " +
                                                  std::to_string(r.max_answer_size) +
                                                  " bytes (relay.max_result_size)");
  };
  // Interim answers (1xx: 102 Processing, 103 Early Hints, a 100 Continue nobody asked for) come
  // before the final one and are passed over (RFC 9110 §15.2: a client must parse them). Taken
  // for the answer, the job would fail on it and the real answer stay on the kept-alive
  // connection, read by the next job as its own.
  std::optional<http::response_parser<http::buffer_body>> answer;
  for (;;) {
    answer.emplace();
    if (r.max_answer_size)
      answer->body_limit(r.max_answer_size);
    else
      answer->body_limit(boost::none);
    http::read_header(sock, impl_->buffer, *answer, ec);
    if (ec == http::error::body_limit) throw too_large();
    if (ec) throw read_failed(ec, "waiting for the answer");
    const unsigned status = answer->get().result_int();
    if (status < 100 || status >= 200) break;
    if (status == 101) {  // a protocol switch, asked for by nobody: the connection is not HTTP now
      drop();
      throw InferenceError("inference_failed", "the model answered 101 Switching Protocols");
    }
  }
  auto& parser = *answer;
  char chunk[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    http::read(sock, impl_->buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::body_limit) throw too_large();
    if (ec) throw read_failed(ec, "reading the answer");
    out.body.write(chunk, sizeof chunk - parser.get().body().size);
  }
  if (stop.stop_requested()) {
    drop();
    throw Aborted();
  }
  out.status = static_cast<long>(parser.get().result_int());
  out.content_type = std::string(parser.get()[http::field::content_type]).substr(0, 255);
  out.retry_after = std::string(parser.get()[http::field::retry_after]).substr(0, 64);
  if (cut || !parser.get().keep_alive()) drop();  // (a request cut short ends its connection)
  return out;
}

}  // namespace relay::sidecar
