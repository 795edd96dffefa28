// relay-inference-noop — a no-op inference server for tests, benchmarks and the demo.
//
// GET  /health        → --health-status (default 200)
// POST /<any path>    → reads the multipart body as it streams, answers --status with JSON
//                       describing each part: name, filename, content_type, size, sha256, and
//                       the value of small non-file fields.
// --delay holds each answer while watching the connection: if the client drops it (a cancelled
// job), "dropped <path>" is appended to --events. Every request appends "request <path>".
// --result-bytes pads every answer (large-result tests). --progress-steps N reports progress N
// times to the relay's Relay-Progress-URL, spread over --delay ("progress <i> <status>" each).
// --meet N holds each POST until N have been in flight at once (or 30 s pass), so that a test
// of a relay running several jobs at once does not depend on timing; with --events, each POST
// appends "in-flight <n>" as it starts. --endless-chunk-line answers every POST with a chunked
// body whose first chunk line never ends (a broken or hostile model server; up to 256 MiB, until
// the client hangs up: "endless answer cut after <bytes>"). --no-digest leaves sha256 out (the
// benchmarks: hashing a 1 MiB input cost this server ~0.5 ms a request, work a no-op model
// does not stand for).
// SIGTERM ends it at once (PID 1 in a pod).
//
// Synchronous Beast with a thread per connection: simple, and fast enough never to be the
// bottleneck for one relay.

#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/hex.hpp"
#include "common/signals.hpp"
#include "multipart/parser.hpp"
#include "progress_report.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

struct Options {
  std::string listen = "127.0.0.1:9000";
  unsigned health_status = 200;
  unsigned status = 200;
  long fail_first = -1;     // >= 0: only the first N POSTs answer --status, the rest 200
  std::string retry_after;  // sent with failures when set
  long delay_ms = 0;
  std::vector<long> delays_ms;  // the n-th POST's delay (the last for the rest), if given
  std::uint64_t result_bytes = 0;
  std::string events;
  std::string content_type = "application/json";  // of POST answers (tests of non-JSON models)
  long progress_steps = 0;
  long meet = 0;
  bool endless_chunk_line = false;
  bool digest = true;  // sha256 of each part (--no-digest: none)
};

// POSTs in flight now, and the most ever at once (for --meet).
std::mutex flight_mu;
std::condition_variable flight_cv;
long in_flight = 0, most_in_flight = 0;

class InFlight {
 public:
  InFlight() {
    std::unique_lock lock(flight_mu);
    most_in_flight = std::max(most_in_flight, ++in_flight);
    n_ = in_flight;
    flight_cv.notify_all();
  }
  ~InFlight() {
    std::lock_guard lock(flight_mu);
    --in_flight;
  }
  long count() const { return n_; }
  // Until --meet POSTs have been in flight at once; false after 30 s without.
  static bool meet(long n) {
    std::unique_lock lock(flight_mu);
    return flight_cv.wait_for(lock, std::chrono::seconds(30), [n] { return most_in_flight >= n; });
  }

 private:
  long n_ = 0;
};

std::mutex events_mu;
void event(const Options& o, const std::string& line) {
  if (o.events.empty()) return;
  std::lock_guard lock(events_mu);
  std::ofstream f(o.events, std::ios::app);
  f << line << "\n";
}

// Records each part of a multipart body as it streams through the shared parser: its name,
// filename, content type, size and SHA-256, and for a field its value (first 4 KiB).
class MultipartScanner final : private relay::multipart::Handler {
 public:
  MultipartScanner(std::string boundary, bool digest)
      : parser_(std::move(boundary), *this), digest_(digest) {}
  void feed(std::string_view data) { parser_.feed(data); }
  bool complete() const { return parser_.done(); }
  boost::json::array parts() {
    finish_part();
    return parts_;
  }

 private:
  void on_part(const relay::multipart::PartInfo& info) override {
    finish_part();
    cur_ = boost::json::object{{"name", info.name}};
    if (info.has_filename) cur_["filename"] = info.filename;
    if (!info.content_type.empty()) cur_["content_type"] = info.content_type;
    size_ = 0;
    value_.clear();
    in_part_ = true;
    if (!digest_) return;
    md_.reset(EVP_MD_CTX_new());
    EVP_DigestInit_ex(md_.get(), EVP_sha256(), nullptr);
  }
  void on_data(std::string_view data) override {
    size_ += data.size();
    if (value_.size() < 4096) value_.append(data.substr(0, 4096 - value_.size()));
    if (md_) EVP_DigestUpdate(md_.get(), data.data(), data.size());
  }
  void finish_part() {
    if (!std::exchange(in_part_, false)) return;
    cur_["size"] = size_;
    if (md_) {
      unsigned char digest[32];
      unsigned len = 0;
      EVP_DigestFinal_ex(md_.get(), digest, &len);
      md_.reset();
      cur_["sha256"] = relay::to_hex(digest, len);
    }
    if (!cur_.contains("filename")) cur_["value"] = value_;
    parts_.push_back(cur_);
  }
  struct MdFree {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  relay::multipart::Parser parser_;
  std::string value_;
  boost::json::object cur_;
  std::uint64_t size_ = 0;
  std::unique_ptr<EVP_MD_CTX, MdFree> md_;
  const bool digest_;
  bool in_part_ = false;
  boost::json::array parts_;
};

// How long the n-th POST (from 0) is held.
long delay_for(const Options& o, size_t n) {
  if (o.delays_ms.empty()) return o.delay_ms;
  return o.delays_ms[std::min(n, o.delays_ms.size() - 1)];
}

// Waits up to delay for the client to close; true if it did.
bool client_dropped_within(int fd, long delay_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
  for (;;) {
    // Rounded up: truncated, the last wait ended up to a millisecond early, and a 20 ms job
    // took 19.5 ms on average (the benchmark's 20 ms case read 101.6% of the ideal rate).
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
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
  // Beast reads as much as the buffer has room for, at least 512 bytes: a buffer left to grow
  // by itself read a 1 MiB input in 2,048 calls, ~1.7 CPU-ms per MiB — more than the relay and
  // the gateway together spent on the job (the benchmark counts the model's CPU in Relay's).
  beast::flat_buffer buffer;
  buffer.reserve(64 * 1024);
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
      static std::atomic<size_t> arrived{0};
      const size_t post_number = arrived++;
      event(o, "request " + path);
      InFlight flight;
      event(o, "in-flight " + std::to_string(flight.count()));
      if (o.meet > 0 && !InFlight::meet(o.meet)) event(o, "meet timed out");
      std::string boundary =
          relay::multipart::boundary_of(std::string(req[http::field::content_type])).value_or("");
      MultipartScanner scanner(boundary.empty() ? "-" : boundary, o.digest);
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
      if (o.endless_chunk_line) {
        std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            "\r\n5;name=";
        asio::write(sock, asio::buffer(head), ec);
        const std::string more(1 << 20, 'a');
        std::uint64_t sent = 0;
        while (!ec && sent < (256u << 20)) sent += asio::write(sock, asio::buffer(more), ec);
        event(o, "endless answer cut after " + std::to_string(sent));
        return;
      }
      if (auto tp = req["traceparent"]; !tp.empty()) event(o, "traceparent " + std::string(tp));
      const std::string progress_url(req["Relay-Progress-URL"]);
      if (!progress_url.empty()) event(o, "progress-url " + progress_url);
      if (o.progress_steps > 0 && progress_url.starts_with("http://")) {
        for (long i = 1; i <= o.progress_steps; ++i) {
          if (client_dropped_within(sock.native_handle(), o.delay_ms / o.progress_steps)) {
            event(o, "dropped " + path);
            return;
          }
          const unsigned st = relay::examples::report_progress(
              progress_url, static_cast<double>(i) / static_cast<double>(o.progress_steps),
              "step " + std::to_string(i) + " of " + std::to_string(o.progress_steps));
          event(o, "progress " + std::to_string(i) + " " + std::to_string(st));
        }
      } else if (long delay = delay_for(o, post_number);
                 delay > 0 && client_dropped_within(sock.native_handle(), delay)) {
        event(o, "dropped " + path);
        return;
      }
      boost::json::object out{{"path", path},
                              {"bytes", total},
                              {"multipart_complete", scanner.complete()},
                              {"parts", scanner.parts()}};
      static std::atomic<long> posts{0};
      const unsigned status = o.fail_first < 0 || posts++ < o.fail_first ? o.status : 200;
      res.result(status);
      if (status != 200) {
        out["error"] = "injected failure (--status " + std::to_string(status) + ")";
        if (!o.retry_after.empty()) res.set(http::field::retry_after, o.retry_after);
      }
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
  app.add_option("--fail-first", o.fail_first,
                 "only the first N POSTs answer --status; the rest 200 (a model that recovers)");
  app.add_option("--retry-after", o.retry_after, "Retry-After sent with failures");
  app.add_option("--delay-ms", o.delay_ms,
                 "hold each POST's answer this long, watching for the client to drop");
  app.add_option("--delays-ms", o.delays_ms,
                 "hold the n-th POST's answer the n-th of these (the last for the rest), in "
                 "order of arrival; instead of --delay-ms")
      ->delimiter(',');
  app.add_option("--result-bytes", o.result_bytes,
                 "add a \"padding\" field of this many bytes to every POST's answer");
  app.add_option("--events", o.events, "append one line per request/drop/done to this file");
  app.add_option("--content-type", o.content_type, "Content-Type of the answers to POST");
  app.add_option("--progress-steps", o.progress_steps,
                 "report progress this many times to Relay-Progress-URL, over --delay-ms");
  app.add_option("--meet", o.meet,
                 "hold each POST until this many have been in flight at once (at most 30 s)");
  app.add_flag("!--no-digest", o.digest, "leave each part's sha256 out of the answers");
  app.add_flag("--endless-chunk-line", o.endless_chunk_line,
               "answer each POST with a chunked body whose first chunk line never ends");
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
