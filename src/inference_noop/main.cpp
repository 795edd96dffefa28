// relay-inference-noop — a no-op inference server for tests, benchmarks and the demo.
//
// GET  /health        → --health-status (default 200)
// POST /<any path>    → reads the multipart body as it streams, answers --status with JSON
//                       describing each part: name, filename, content_type, size, sha256, and
//                       the value of small non-file fields.
// --delay holds each answer while watching the connection: if the client drops it (a cancelled
// job), "dropped <path>" is appended to --events. Every request appends "request <path>".
// --result-bytes pads every answer (large-result tests). SIGTERM ends it at once (PID 1 in a pod).
//
// Synchronous Beast with a thread per connection: simple, and fast enough never to be the
// bottleneck for one relay.

#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/signals.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

struct Options {
  std::string listen = "127.0.0.1:9000";
  unsigned health_status = 200;
  unsigned status = 200;
  long delay_ms = 0;
  std::uint64_t result_bytes = 0;
  std::string events;
  std::string content_type = "application/json";  // of POST answers (tests of non-JSON models)
};

std::mutex events_mu;
void event(const Options& o, const std::string& line) {
  if (o.events.empty()) return;
  std::lock_guard lock(events_mu);
  std::ofstream f(o.events, std::ios::app);
  f << line << "\n";
}

// Streaming multipart/form-data reader: feed() takes body bytes in any chunking and records
// each part; only a boundary's length of bytes is held back between calls.
class MultipartScanner {
 public:
  explicit MultipartScanner(std::string boundary) : delim_("\r\n--" + std::move(boundary)) {
    buf_ = "\r\n";  // the first delimiter has no leading CRLF; pretend it has
  }
  void feed(std::string_view data) {
    buf_.append(data);
    for (;;) {
      if (state_ == State::body) {
        auto pos = buf_.find(delim_);
        if (pos == std::string::npos) {
          size_t keep = std::min(buf_.size(), delim_.size());
          consume_body(std::string_view(buf_).substr(0, buf_.size() - keep));
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        consume_body(std::string_view(buf_).substr(0, pos));
        if (in_part_) finish_part();
        buf_.erase(0, pos + delim_.size());
        state_ = State::after_delim;
      }
      if (state_ == State::after_delim) {
        if (buf_.size() < 2) return;
        if (buf_.compare(0, 2, "--") == 0) {
          state_ = State::done;
          return;
        }
        state_ = State::headers;
      }
      if (state_ == State::headers) {
        auto end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buf_.size() > 16384) throw std::runtime_error("multipart part headers too long");
          return;
        }
        start_part(buf_.substr(0, end));
        buf_.erase(0, end + 4);
        state_ = State::body;
      }
      if (state_ == State::done) return;
    }
  }
  bool complete() const { return state_ == State::done; }
  boost::json::array parts() const { return parts_; }

 private:
  enum class State { body, after_delim, headers, done };
  static std::string param(const std::string& headers, const std::string& key) {
    auto p = headers.find(key + "=\"");
    if (p == std::string::npos) return {};
    p += key.size() + 2;
    return headers.substr(p, headers.find('"', p) - p);
  }
  void start_part(const std::string& headers) {
    in_part_ = true;
    cur_ = boost::json::object{};
    cur_["name"] = param(headers, "name");
    std::string filename = param(headers, "filename");
    if (!filename.empty()) cur_["filename"] = filename;
    auto ct = headers.find("Content-Type: ");
    if (ct != std::string::npos)
      cur_["content_type"] = headers.substr(ct + 14, headers.find("\r\n", ct) - ct - 14);
    size_ = 0;
    value_.clear();
    md_.reset(EVP_MD_CTX_new());
    EVP_DigestInit_ex(md_.get(), EVP_sha256(), nullptr);
  }
  void consume_body(std::string_view data) {
    if (!in_part_ || data.empty()) return;
    size_ += data.size();
    if (value_.size() < 4096) value_.append(data.substr(0, 4096 - value_.size()));
    EVP_DigestUpdate(md_.get(), data.data(), data.size());
  }
  void finish_part() {
    unsigned char digest[32];
    unsigned len = 0;
    EVP_DigestFinal_ex(md_.get(), digest, &len);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned i = 0; i < len; ++i) {
      hex += kHex[digest[i] >> 4];
      hex += kHex[digest[i] & 15];
    }
    cur_["size"] = size_;
    cur_["sha256"] = hex;
    if (!cur_.contains("filename")) cur_["value"] = value_;
    parts_.push_back(cur_);
    in_part_ = false;
  }
  struct MdFree {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::string delim_, buf_, value_;
  State state_ = State::body;
  bool in_part_ = false;
  boost::json::object cur_;
  std::uint64_t size_ = 0;
  std::unique_ptr<EVP_MD_CTX, MdFree> md_;
  boost::json::array parts_;
};

// Waits up to delay for the client to close; true if it did.
bool client_dropped_within(int fd, long delay_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r > 0) {
      char c;
      ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return true;
    }
  }
}

void serve(tcp::socket sock, const Options& o) {
  beast::flat_buffer buffer;
  beast::error_code ec;
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    http::read_header(sock, buffer, parser, ec);
    if (ec) return;
    auto& req = parser.get();
    std::string path(req.target());
    http::response<http::string_body> res;
    res.version(11);
    res.keep_alive(req.keep_alive());
    res.set(http::field::content_type, "application/json");
    if (req.method() == http::verb::get && path == "/health") {
      res.result(o.health_status);
      res.body() = o.health_status == 200 ? R"({"status":"ok"})" : R"({"status":"loading"})";
    } else if (req.method() == http::verb::post) {
      event(o, "request " + path);
      std::string ctype(req[http::field::content_type]);
      auto b = ctype.find("boundary=");
      std::string boundary = b == std::string::npos ? "" : ctype.substr(b + 9);
      if (!boundary.empty() && boundary.front() == '"')
        boundary = boundary.substr(1, boundary.size() - 2);
      MultipartScanner scanner(boundary);
      std::uint64_t total = 0;
      char chunk[64 * 1024];
      while (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof chunk;
        http::read(sock, buffer, parser, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          event(o, "dropped " + path);
          return;
        }
        size_t n = sizeof chunk - parser.get().body().size;
        total += n;
        try {
          if (!boundary.empty()) scanner.feed(std::string_view(chunk, n));
        } catch (const std::exception&) {
          boundary.clear();
        }
      }
      if (o.delay_ms > 0 && client_dropped_within(sock.native_handle(), o.delay_ms)) {
        event(o, "dropped " + path);
        return;
      }
      boost::json::object out{{"path", path},
                              {"bytes", total},
                              {"multipart_complete", scanner.complete()},
                              {"parts", scanner.parts()}};
      res.result(o.status);
      if (o.status != 200)
        out["error"] = "injected failure (--status " + std::to_string(o.status) + ")";
      // A large answer, for tests of the relay's spool: a string of --result-bytes 'x'.
      if (o.result_bytes > 0) out["padding"] = std::string(o.result_bytes, 'x');
      res.body() = boost::json::serialize(out);
      res.set(http::field::content_type, o.content_type);
      event(o, "done " + path);
    } else {
      res.result(http::status::not_found);
      res.body() = R"({"error":"not found"})";
    }
    res.prepare_payload();
    http::write(sock, res, ec);
    if (ec || !res.keep_alive()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"relay-inference-noop: a no-op inference server for tests and benchmarks"};
  app.add_option("--listen", o.listen, "host:port");
  app.add_option("--health-status", o.health_status, "status of GET /health");
  app.add_option("--status", o.status, "status of every POST");
  app.add_option("--delay-ms", o.delay_ms,
                 "hold each POST's answer this long, watching for the client to drop");
  app.add_option("--result-bytes", o.result_bytes,
                 "add a \"padding\" field of this many bytes to every POST's answer");
  app.add_option("--events", o.events, "append one line per request/drop/done to this file");
  app.add_option("--content-type", o.content_type, "Content-Type of the answers to POST");
  CLI11_PARSE(app, argc, argv);
  relay::exit_on_shutdown_signals();
  auto colon = o.listen.rfind(':');
  asio::io_context io;
  tcp::acceptor acceptor(io);
  try {
    tcp::endpoint ep(asio::ip::make_address(o.listen.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(o.listen.substr(colon + 1))));
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(1024);
  } catch (const std::exception& e) {
    std::cerr << "relay-inference-noop: cannot listen on " << o.listen << ": " << e.what() << "\n";
    return 2;
  }
  std::cerr << "relay-inference-noop listening on " << o.listen << std::endl;
  for (;;) {
    tcp::socket sock(io);
    beast::error_code ec;
    acceptor.accept(sock, ec);
    if (ec) continue;
    sock.set_option(tcp::no_delay(true), ec);
    std::thread([s = std::move(sock), &o]() mutable {
      try {
        serve(std::move(s), o);
      } catch (const std::exception&) {
      }
    }).detach();
  }
}
