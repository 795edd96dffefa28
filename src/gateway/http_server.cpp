// The only translation unit of the gateway that includes Boost.Beast — on purpose, and why it is
// longer than our other files: Beast and Asio's coroutines compile once here, not in every file
// that touches a request (a build on 2 cores). Its parts, in order: the body reader, the server's
// sessions, the answers. The shape of a submission:
//
//   I/O thread (this file)              storage pool (Api::pool_for)
//   read the header
//   read a small body, or what is there
//                           ─────────▶  Api::handle
//   answer  ◀─────────────────────────  Response, or an Intake for a body still arriving
//   read the next piece of the body ──▶  Intake::write (storage, encryption)
//   ...
//   the body ended                  ──▶  Intake::finish (the job)
//   group commit (Redis)  ◀───────────  the job's record
//   answer  ◀──────────────────────────  (its reply)
//
// A slow client only ever holds a coroutine and its unread bytes; pool threads only ever work on
// bytes already received, and never wait for a submission's round trip to Redis. Handlers run
// on the pool of what they wait for (Api::pool_for): Redis (the request pool), storage (the
// storage pool: submissions, results' downloads) or neither (readiness, metrics), so health,
// readiness, metrics and status never queue behind uploads, downloads or each other. (A small
// body goes with the header to Api::handle, which finishes its Intake at once: one trip to the
// storage pool.)
#include "gateway/http_server.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <unordered_map>
#include <variant>

#include "common/cgroup.hpp"
#include "common/log.hpp"
#include "common/work_pool.hpp"
#include "config/shared.hpp"
#include "gateway/metrics.hpp"
#include "gateway/transfer_coding.hpp"
#include "gateway/upload_pace.hpp"

namespace relay::gateway {
namespace {

// A group commit's failure that may have left its steps run: the connection broke, or Redis
// stayed silent, after they were sent (a refusal — OOM, LOADING — ran nothing, nor did a batch
// that found no connection).
bool broke(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const redis::IoError& io) {
    return redis::may_have_run(io);
  } catch (...) {
    return false;
  }
}

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace boost::asio::experimental::awaitable_operators;

constexpr auto kHeaderTimeout = std::chrono::seconds(60);  // idle keep-alive and slow headers
// On shutdown, how long a kept-alive connection waiting for its next request may still bring
// one (answered, with `Connection: close`) before it is closed: a client sending on its pooled
// connections now and then (an in-cluster client whose connections kube-proxy keeps on this pod)
// gets answers, not resets, while those that send nothing (an ingress's idle upstream pool, a
// client done for now) no longer hold the process for all of server.shutdown_timeout.
constexpr auto kIdleGraceOnShutdown = std::chrono::seconds(2);
// Readiness and metrics: a probe and a scrape at a time, each quick (one attempt at Redis).
constexpr std::size_t kProbeThreads = 2;
// Read before the handler runs: a body this small costs one trip to the request pool.
constexpr std::size_t kPrefetch = 64 * 1024;
// What an upload hands the storage pool at a time, at most (each hand-off costs two thread
// switches: at 1 MiB they are a few percent of a fast upload's CPU; a fast upload holds two
// pieces); and below what size a piece waits (up to kHold) for more before it is handed on.
constexpr std::size_t kPiece = 1024 * 1024;
constexpr std::size_t kSmallPiece = 16 * 1024;
constexpr std::size_t kDownloadChunk = 64 * 1024;  // a stored object's piece on its way out
constexpr std::size_t kRead = 256 * 1024;          // Beast's read buffer for a chunked body
// Room for the first read of a request: a small one, header and body, comes in one read (with
// Beast's 512-byte minimum a 1 KiB submission took a read, a FIONREAD and another read). Given
// back while a request without a body waits (a long-poll holds none); an idle kept-alive
// connection holds it (4 KiB, not 512 bytes) while it waits for its next request.
constexpr std::size_t kFirstRead = 4096;
constexpr auto kHold = std::chrono::seconds(1);
constexpr const char* kEventStream = "text/event-stream";  // a job's live events

// Now as an HTTP date (RFC 9110 §5.6.7), which every answer carries (§6.6.1: an origin server
// with a clock must): formatted once a second per thread.
std::string_view http_date() {
  thread_local std::time_t formatted = 0;
  thread_local std::array<char, 32> text{};
  const std::time_t now = std::time(nullptr);
  if (now != formatted) {
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    std::strftime(text.data(), text.size(), "%a, %d %b %Y %H:%M:%S GMT", &tm);  // C locale
    formatted = now;
  }
  return text.data();
}

// Threads a pool wakes for short work (WorkPool's `eager`): one per core.
std::size_t cores() {
  return std::max(1u, std::thread::hardware_concurrency());
}

// An upload cut for being too slow or stalled (logged, answered 408 if the client still listens).
struct Cut {
  std::string reason;
};

// A body that breaks HTTP's framing (a bad chunk size or extension, a chunk line longer than the
// read buffer): answered 400, then the connection is closed.
struct Malformed {
  std::string reason;
};

// Upload bytes held in pieces over all requests (server.upload_buffer_memory), and the chunks of
// stored objects being downloaded (kDownloadChunk at most, while the budget has room). A piece
// holds up to kSmallPiece on its own; beyond that it grows only with room taken from here, given
// back when the piece is freed or its upload slows to small pieces. Without room an upload goes on
// in small pieces — more hand-offs to the storage pool, the same bytes — so the gateway's memory
// does not grow with the number of fast uploads (200 at once held 450 MiB before).
class PieceBudget {
 public:
  explicit PieceBudget(std::size_t bytes) : left_(bytes) {}
  // Up to `want` bytes, possibly none.
  std::size_t take(std::size_t want) {
    std::size_t left = left_.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t got = std::min(want, left);
      if (left_.compare_exchange_weak(left, left - got, std::memory_order_relaxed)) return got;
    }
  }
  void give(std::size_t n) { left_.fetch_add(n, std::memory_order_relaxed); }

 private:
  std::atomic<std::size_t> left_;
};

// Bytes of a body as they arrive, in storage that a read fills in place: growing it does not
// zero-fill (std::string would), and it keeps its room between pieces of one upload.
class Piece {
 public:
  explicit Piece(PieceBudget& budget) : budget_(&budget) {}
  Piece(Piece&& o) noexcept { *this = std::move(o); }
  Piece& operator=(Piece&& o) noexcept {
    if (this != &o) {
      release();
      budget_ = o.budget_;
      data_ = std::move(o.data_);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      borrowed_ = std::exchange(o.borrowed_, 0);
    }
    return *this;
  }
  ~Piece() { release(); }

  std::string_view view() const { return {data_.get(), size_}; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Empties the piece for the next read. One that held a small piece last (a slow client) lets
  // its large room go: a trickling upload keeps no share of the budget.
  void clear() {
    if (size_ < kSmallPiece && capacity_ > kSmallPiece) release();
    size_ = 0;
  }
  // Room after the content for n bytes if it may, never more than `limit` in all (empty when
  // the piece is full and the budget has no more): grown geometrically, so a piece filled by
  // many reads is copied a bounded number of times.
  std::span<char> room(std::size_t n, std::size_t limit) {
    if (capacity_ - size_ < n) {
      std::size_t grown = std::min(limit, std::max(size_ + n, 2 * capacity_));
      if (grown > kSmallPiece + borrowed_)
        borrowed_ += budget_->take(grown - kSmallPiece - borrowed_);
      grown = std::min(grown, kSmallPiece + borrowed_);
      if (grown > capacity_) {
        auto bigger = std::make_unique_for_overwrite<char[]>(grown);
        if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
        data_ = std::move(bigger);
        capacity_ = grown;
      }
    }
    return {data_.get() + size_, std::min(capacity_, limit) - std::min(size_, limit)};
  }
  void grew(std::size_t n) { size_ += n; }

 private:
  void release() {
    if (budget_) budget_->give(std::exchange(borrowed_, 0));
    data_.reset();
    capacity_ = 0;
  }

  PieceBudget* budget_ = nullptr;
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0, capacity_ = 0;
  std::size_t borrowed_ = 0;  // of the budget: the capacity beyond kSmallPiece
};

// A request's body, read asynchronously on the I/O thread: a slow client costs this coroutine
// and the bytes it holds, never a thread. Each read is bounded by server.body_idle_timeout, and
// the client's pace is judged by UploadPace (server.min_upload_rate).
//
// A body of declared length is read straight from the socket into the piece, past Beast's
// parser (which would copy every byte twice more: into its buffer, then out of it): the bytes
// that came with the header are taken from the buffer first, and exactly the declared length
// is consumed, so a pipelined next request stays in the buffer for the next parser. A chunked
// body goes through the parser.
class BodyReader {
 public:
  BodyReader(beast::tcp_stream& stream, beast::flat_buffer& buffer,
             http::request_parser<http::buffer_body>& parser, const Config& cfg)
      : stream_(stream), buffer_(buffer), parser_(parser), cfg_(cfg), idle_(stream.get_executor()) {
    if (!parser_.is_done() && !parser_.chunked() && parser_.content_length())
      remaining_ = *parser_.content_length();
  }
  ~BodyReader() {
    if (watch_) watch_->socket = nullptr;  // (an expiry already queued finds no socket)
  }
  BodyReader(const BodyReader&) = delete;
  BodyReader& operator=(const BodyReader&) = delete;

  bool done() const { return remaining_ ? *remaining_ == 0 : parser_.is_done(); }
  std::uint64_t received() const { return pace_ ? pace_->bytes() : 0; }

  // The body is refused: a read under way ends now (its socket operation cancelled; the socket
  // stays open for the answer), and one about to start does not.
  void abandon() {
    abandoned_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  }
  struct Abandoned {};

  // Appends to out what arrives, at least one read's worth: then more while more is already
  // there, until `max` bytes, or the end. With hold_small, a piece under kSmallPiece also waits
  // for more for up to a second, so that a trickle is handed on in pieces, not byte by byte;
  // with whole, it waits for the end (up to max). Throws Cut, or beast::system_error when the
  // client goes away.
  asio::awaitable<void> read(Piece& out, std::size_t max, bool hold_small, bool whole = false) {
    const auto start = Clock::now();
    // One deadline for the call (it waits for the client at most once: later reads find bytes
    // already there, or are the short hold of a small piece), not one per read — but for whole.
    // Disarmed however the call ends: time spent storing what came is not the client's.
    arm();
    struct Disarm {
      BodyReader& r;
      ~Disarm() { r.disarm(); }
    } disarm_at_end{*this};
    // From when the client was waited for, to its bytes: what UploadPace judges.
    std::optional<Clock::time_point> waited;
    bool framing = false;  // the buffer holds framing alone: nothing of the body is ready
    while (!done() && out.size() < max) {
      if (abandoned_) throw Abandoned{};
      if (whole) arm();  // (it waits once per read)
      // With bytes in hand, only what is already there is taken: the client is waited for
      // only by a small piece on hold, and only until its hold ends.
      bool wait = out.empty() || whole;
      beast::error_code aec;
      std::size_t ready = framing              ? 0
                          : buffer_.size() > 0 ? buffer_.size()
                                               : stream_.socket().available(aec);
      if (!wait && ready == 0) {
        const bool hold = hold_small && out.size() < kSmallPiece;
        if (!hold) break;
        if (!waited) waited = Clock::now();
        if (!co_await readable_before(start + kHold)) break;
        ready = stream_.socket().available(aec);
        // Readable with nothing to read: the client's end, or an error, which the read says.
        if (ready == 0) wait = true;
      }
      // Room for what is waiting, 4 KiB when the read will wait: a thousand trickling clients
      // must not each hold a large buffer for the few bytes they send.
      const auto room = out.room(std::max<std::size_t>(ready, 4096), max);
      if (room.empty()) break;  // full, and the budget has no more room for it
      const auto t0 = waited.value_or(Clock::now());
      const std::size_t got = co_await read_some(room, wait);
      if (abandoned_) throw Abandoned{};  // (what the cancelled read got is not wanted)
      framing = got == 0;                 // (!wait: what there was to parse was framing)
      if (framing) continue;
      waited.reset();
      out.grew(got);
      if (!pace_) pace_.emplace(cfg_.body_idle_timeout / 2, cfg_.min_upload_rate);
      if (!pace_->record(Clock::now() - t0, got)) throw Cut{"slower than server.min_upload_rate"};
    }
    // Unless the read stopped on a full piece (more is coming at once), the room goes: a client
    // that keeps us waiting, or a finished request's kept-alive connection, holds no large buffer.
    if (out.size() < max && buffer_.size() == 0 && buffer_.capacity() > kSmallPiece)
      buffer_.shrink_to_fit();
  }

  double rate() const { return pace_ ? pace_->rate() : 0; }

 private:
  // The wait for the client's next byte is bounded by a timer of our own, not the stream's
  // expiry: Beast closes the socket when that fires, and the 408 could not be written. This one
  // cancels the read under way (it ends with operation_aborted) and the socket stays open for
  // the answer. Shared with the timer's handler, which may run after this reader is gone, or
  // after a later arm() (`armed` says which deadline is current); made at the first read (most
  // requests have no body).
  struct Watch {
    tcp::socket* socket = nullptr;
    std::uint64_t armed = 0;
    bool fired = false;
  };
  void arm() {
    if (!watch_) watch_ = std::make_shared<Watch>(Watch{.socket = &stream_.socket()});
    const std::uint64_t generation = ++watch_->armed;
    watch_->fired = false;
    idle_.expires_after(cfg_.body_idle_timeout);
    idle_.async_wait([watch = watch_, generation](const beast::error_code& ec) {
      if (ec || watch->armed != generation || !watch->socket) return;
      watch->fired = true;
      beast::error_code ignored;
      watch->socket->cancel(ignored);
    });
  }
  void disarm() {
    ++watch_->armed;
    idle_.cancel();
  }

  static constexpr const char* kIdleCut = "no byte for server.body_idle_timeout";

  // Whether the socket has bytes to read before deadline (or an error to say).
  asio::awaitable<bool> readable_before(Clock::time_point deadline) {
    if (Clock::now() >= deadline) co_return false;
    asio::steady_timer timer(stream_.get_executor(), deadline);
    beast::error_code ec;
    auto first =
        co_await (stream_.socket().async_wait(tcp::socket::wait_read,
                                              asio::redirect_error(asio::use_awaitable, ec)) ||
                  timer.async_wait(asio::redirect_error(asio::use_awaitable, ec)));
    if (abandoned_) throw Abandoned{};
    if (first.index() == 0 && watch_ && watch_->fired) throw Cut{kIdleCut};
    co_return first.index() == 0;
  }

  // One read into `to`: from the bytes already buffered, or the socket. Without wait, 0 when
  // none of the body's bytes are there yet: what is buffered of a chunked body may be framing
  // alone (the CRLF after a chunk's data, half the next chunk's size line), and waiting for the
  // rest would keep what was read from storage — and a refusal from the client who stopped
  // sending to hear it — until the client sends again.
  asio::awaitable<std::size_t> read_some(std::span<char> to, bool wait) {
    beast::error_code ec;
    std::size_t got = 0;
    if (remaining_) {
      to = to.first(static_cast<std::size_t>(std::min<std::uint64_t>(to.size(), *remaining_)));
      if (buffer_.size() > 0) {
        got = asio::buffer_copy(asio::buffer(to.data(), to.size()), buffer_.data());
        buffer_.consume(got);
      } else {
        got = co_await stream_.async_read_some(asio::buffer(to.data(), to.size()),
                                               asio::redirect_error(asio::use_awaitable, ec));
      }
      *remaining_ -= got;
    } else {
      parser_.get().body().data = to.data();
      parser_.get().body().size = to.size();
      // What is buffered is parsed here, every chunk it holds at once. Beast's async read
      // would hand over one chunk per completion, a turn of the scheduler each: a client
      // sending 1-byte chunks cost ~1.5 µs of CPU per byte.
      parser_.eager(true);
      if (buffer_.size() > 0) {
        buffer_.consume(parser_.put(buffer_.data(), ec));
        if (ec == http::error::need_more || ec == http::error::need_buffer) ec = {};
      }
      got = to.size() - parser_.get().body().size;
      // The socket is read here, one operation at a time, not by Beast's http::async_read_some:
      // that one reads again by itself while what came is not enough to parse (the end of a
      // chunk, half a chunk line) — and a read started after abandon() cancelled the socket
      // is never cancelled: a refused body whose client stopped sending then waited
      // body_idle_timeout for its answer (when the last read's completion was queued behind
      // the refusal's).
      while (!ec && got == 0 && !parser_.is_done()) {
        if (abandoned_) throw Abandoned{};
        if (!wait && stream_.socket().available(ec) == 0) break;
        // As much as the buffer's free capacity, at least 512 bytes: without room a large
        // upload would take a system call per 512 bytes.
        if (buffer_.size() == 0) buffer_.reserve(kRead);
        const std::size_t size = beast::read_size(buffer_, kRead);
        if (size == 0) {  // one chunk line fills the buffer
          ec = http::error::buffer_overflow;
          break;
        }
        buffer_.commit(co_await stream_.async_read_some(
            buffer_.prepare(size), asio::redirect_error(asio::use_awaitable, ec)));
        if (ec) break;
        buffer_.consume(parser_.put(buffer_.data(), ec));
        if (ec == http::error::need_more || ec == http::error::need_buffer) ec = {};
        got = to.size() - parser_.get().body().size;
      }
    }
    if (ec == asio::error::operation_aborted && watch_ && watch_->fired) throw Cut{kIdleCut};
    // The buffer's limit reached on one chunk line, or framing Beast refuses: the client's
    // fault, said as such (a socket error is the client going away, rethrown as it is).
    if (ec == http::error::buffer_overflow)
      throw Malformed{"a chunk line longer than " + std::to_string(buffer_.max_size()) + " bytes"};
    if (ec && ec.category() == beast::error_code(http::error::bad_chunk).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      throw Malformed{ec.message()};
    if (ec) throw beast::system_error(ec);
    co_return got;
  }

  beast::tcp_stream& stream_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  const Config& cfg_;
  std::optional<std::uint64_t> remaining_;  // of a body of declared length, read directly
  std::optional<UploadPace> pace_;          // from the first read: most requests have no body
  bool abandoned_ = false;
  asio::steady_timer idle_;
  std::shared_ptr<Watch> watch_;  // see arm()
};

}  // namespace

struct HttpServer::Impl {
  const Config& cfg;
  Api& api;
  Notifier& notifier;
  // Sockets of live sessions, so that shutdown can cut what is still running at its deadline
  // (a pool thread blocked reading a stalled upload included). Declared before io: sessions
  // that io destroys unfinished unregister themselves on the way out.
  std::mutex sockets_mu;
  std::set<int> sockets;
  // Sessions waiting for their next request (io thread only): a shutdown closes those with no
  // byte of one yet, after kIdleGraceOnShutdown. By socket.
  struct Idle {
    beast::tcp_stream* stream;
    const beast::flat_buffer* buffer;  // holds the bytes of a request arriving
  };
  std::unordered_map<int, Idle> idle;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  WorkPool pool;             // request handlers (server.blocking_threads)
  WorkPool storing;          // uploads' bytes -> storage, results' <- it (server.upload_threads)
  WorkPool probes;           // readiness and metrics: never behind requests (Api::pool_for)
  PieceBudget piece_budget;  // server.upload_buffer_memory
  std::atomic<long> connections{0};
  // Submits in the group commit: io must outlive their hand-backs (~HttpServer waits for them).
  std::mutex commits_mu;
  std::condition_variable commits_cv;
  long commits = 0;
  std::atomic<bool> stopping{false};
  bool failed = false;  // the accept loop ended without stop()
  // Where the unread bodies of answered requests go (close_after_answer), one for all: the bytes
  // are thrown away, and a buffer per connection let a client holding many such connections
  // open cost the gateway 64 KiB each (5,000 of them: 400 MiB).
  std::array<char, 64 * 1024> drain_sink;
  ConnectionBudget budget;

  Impl(const Config& c, Api& a, Notifier& n)
      : cfg(c),
        api(a),
        notifier(n),
        pool(static_cast<std::size_t>(c.blocking_threads), cores(), std::chrono::milliseconds(1),
             "requests"),
        storing(static_cast<std::size_t>(c.upload_threads), cores(), std::chrono::milliseconds(1),
                "storage"),
        probes(kProbeThreads, 1, std::chrono::milliseconds(1), "probes"),
        piece_budget(static_cast<std::size_t>(c.upload_buffer_memory)) {
    const auto memory = c.connection_memory > 0 ? static_cast<std::uint64_t>(c.connection_memory)
                                                : memory_limit() / 2;
    budget = gateway::connection_budget(
        {.configured = c.max_connections,
         .open_files = raise_open_file_limit(),
         .pool_threads = c.blocking_threads + c.upload_threads + static_cast<long>(kProbeThreads),
         .memory = memory,
         .per_connection = connection_cost(static_cast<std::uint64_t>(c.max_header_size))});
    if (c.max_connections > budget.max_connections)
      log::warn("server.max_connections lowered to fit the open-file limit",
                {{"configured", c.max_connections},
                 {"max_connections", budget.max_connections},
                 {"open_files", budget.open_files}});
  }

  void drain(Clock::time_point deadline, Clock::time_point close_idle) {
    if (connections.load() == 0) {
      io.stop();
      return;
    }
    if (Clock::now() >= close_idle) {
      // The read of what never came ends (operation_aborted): its session returns, closing.
      for (auto& [fd, waiting] : idle)
        if (waiting.buffer->size() == 0) waiting.stream->cancel();
    }
    if (Clock::now() >= deadline) {
      std::lock_guard lock(sockets_mu);
      log::warn("shutdown deadline passed; cutting the connections still open",
                {{"connections", static_cast<std::int64_t>(sockets.size())}});
      for (int fd : sockets) ::shutdown(fd, SHUT_RDWR);
      io.stop();  // (run() then stops their requests' waits for Redis and drops queued ones)
      return;
    }
    auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
    t->async_wait(
        [this, t, deadline, close_idle](beast::error_code) { drain(deadline, close_idle); });
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
          log::warn("cannot accept connections; pausing",
                    {{"error", ec.message()},
                     {"connections", connections.load()},
                     {"max_connections", budget.max_connections}});
          last_warning = Clock::now();
        }
        pause.expires_after(std::chrono::milliseconds(100));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      if (connections.load() >= budget.max_connections) {
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

  // The pool a request's handler runs on: that of what it waits for.
  WorkPool& pool_for(const Request& r) {
    switch (Api::pool_for(r)) {
      case Api::Pool::storage:
        return storing;
      case Api::Pool::probes:
        return probes;
      case Api::Pool::requests:
        break;
    }
    return pool;
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
    // Bounded: a chunk line (its size and extensions) must fit, or the request is refused; a
    // header has its own limit, server.max_header_size.
    beast::flat_buffer buffer(kRead + static_cast<std::size_t>(cfg.max_header_size));
    for (;;) {
      http::request_parser<http::buffer_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_size));
      parser.body_limit(boost::none);  // the API enforces input limits (413)
      stream.expires_after(kHeaderTimeout);
      if (buffer.capacity() < kFirstRead) buffer.reserve(kFirstRead);
      beast::error_code read_error;
      {
        idle.insert_or_assign(fd, Idle{&stream, &buffer});
        struct Busy {
          Impl& impl;
          int fd;
          ~Busy() { impl.idle.erase(fd); }
        } busy{*this, fd};
        try {
          co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
        } catch (const beast::system_error& e) {
          read_error = e.code();
        }
      }
      if (read_error) {
        if (read_error == http::error::end_of_stream || read_error == asio::error::eof) co_return;
        if (read_error == beast::error::timeout || read_error == asio::error::operation_aborted)
          co_return;
        if (read_error == asio::error::connection_reset) co_return;
        // (The answer's parts made before the co_await: GCC 12 miscompiles a ?: whose branches
        // make temporaries inside a co_await's expression — the gateway crashed here.)
        const bool too_large = read_error == http::error::header_limit;
        std::string why = too_large ? "the request header is larger than " +
                                          std::to_string(cfg.max_header_size) + " bytes"
                                    : "malformed HTTP request: " + read_error.message();
        co_await refuse(stream, too_large ? 431 : 400,
                        too_large ? "header_too_large" : "bad_request", std::move(why));
        co_return;
      }
      stream.expires_never();
      const auto started = Clock::now();
      auto& req = parser.get();
      if (auto refusal = refuse_transfer_coding(req[http::field::transfer_encoding])) {
        // Its body is not read as a request (see transfer_coding.hpp): answered, then closed.
        co_await refuse(stream, refusal->status,
                        refusal->status == 400 ? "bad_request" : "not_implemented",
                        refusal->message);
        co_return;
      }
      // RFC 9112 §3.2: an HTTP/1.1 request without Host, and any with more than one, is 400 —
      // requests a proxy in front may route by another Host than the one it forwards.
      if (const auto hosts = req.count(http::field::host);
          hosts > 1 || (hosts == 0 && req.version() >= 11)) {
        co_await refuse(
            stream, 400, "bad_request",
            hosts > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
        co_return;
      }
      Request r;
      // HEAD is GET without the body (RFC 9110 §9.3.2): uptime monitors and load balancers
      // probe with it. It is answered as GET is, then only the header is written.
      const bool head = req.method() == http::verb::head;
      r.method = head ? std::string("GET") : std::string(req.method_string());
      r.target = origin_form(req.target());
      r.header = [&req](std::string_view name) -> std::string {
        auto it = req.find(name);
        return it == req.end() ? std::string() : std::string(it->value());
      };
      if (auto n = parser.content_length()) r.content_length = *n;
      r.has_body = !parser.is_done();
      if (!r.has_body && buffer.size() == 0) buffer.shrink_to_fit();  // (see kFirstRead)
      const bool expect_continue =
          beast::iequals(req[http::field::expect], "100-continue") && r.has_body;
      BodyReader body(stream, buffer, parser, cfg);

      // The request's handling is a coroutine of its own (see respond()), and the coroutines
      // below are handed `resp` by reference and put their answer in it: a Response taken or
      // returned by value would be a copy in this frame, held as long as the connection.
      Response resp;
      co_await respond(stream, body, r, expect_continue, resp);

      if (!resp.wait_job.empty() && resp.wait_target.empty()) {
        co_await long_poll(stream, r, resp);
      } else if (!resp.wait_job.empty()) {
        // A submission that waits for its job (Prefer: wait): asked again as a read of the job.
        Request of_job;
        of_job.method = "GET";
        of_job.target = resp.wait_target;
        of_job.header = r.header;
        of_job.after_submit = true;
        // Counted apart: its duration is the job's, and would swamp the submissions' own.
        const std::string route = resp.route + " (waiting)";
        auto said = std::move(resp.headers);  // (its Location, Idempotent-Replayed: said again)
        co_await long_poll(stream, of_job, resp);
        resp.route = route;
        if (resp.status == 200 || resp.status == 202)
          resp.headers.insert(resp.headers.end(), said.begin(), said.end());
      }
      api.decorate(r, resp);
      if (resp.event && head) {
        // What an event stream's header would say; no events.
        resp.event.reset();
        resp.content_type = kEventStream;
        resp.headers.emplace_back("Cache-Control", "no-store");
        resp.body.clear();
        resp.close = true;
      }
      if (resp.event) {
        // An event stream holds the connection until the job ends, then closes it.
        const std::string route = resp.route;
        co_await event_stream(stream, r, resp);
        metrics().requests.add({route, "200"});
        co_return;
      }

      const bool close = resp.close || !body.done() || !req.keep_alive() || stopping.load();
      // Counted before it is written: a client holding its answer finds it in /metrics. The
      // duration is the time to answer, not the client's pace reading it.
      metrics().requests.add({resp.route, std::to_string(resp.status)});
      metrics().request_seconds.observe(
          {resp.route}, std::chrono::duration<double>(Clock::now() - started).count());
      co_await write(stream, resp, close, head);
      if (close) {
        co_await close_after_answer(stream, !body.done());
        co_return;
      }
    }
  }

  // An answer that ends the connection — to a request that is not HTTP, or whose body cannot be
  // read as one —, then the connection half-closed: what the client still sends (the rest of an
  // oversized header, a body) read and dropped, or the close would reset the connection before
  // the client read why. (Not in session(): see respond().)
  asio::awaitable<void> refuse(beast::tcp_stream& stream, unsigned status, std::string code,
                               std::string message) {
    Response no = error_response(status, code, message);
    co_await write(stream, no, true);
    co_await close_after_answer(stream, /*unread_body=*/true);
  }

  // A request's answer, from its header to its handler's verdict on its body: the body read,
  // the handler run, an intake taken through its gates and fed. A coroutine of its own, and not
  // part of session(), for the memory a held connection costs: GCC gives every local and every
  // co_await's result of a coroutine a place of its own in its frame, and the ~20 Responses
  // this takes made session()'s frame 8.7 KiB, held by every open connection — a long-poll's,
  // an idle keep-alive's — for as long as it stays open (10,000 long-polls: 221 MiB, over the
  // 200 MiB the gateway's benchmark holds them to). This frame lives only until the answer.
  asio::awaitable<void> respond(beast::tcp_stream& stream, BodyReader& body, Request& r,
                                bool expect_continue, Response& resp) {
    std::unique_ptr<Intake> intake;
    std::exception_ptr failed;
    try {
      // A small body (or the first piece of a large one) is read before the handler runs,
      // so that a small submission costs one trip to the pool. A client waiting for
      // `100 Continue` is asked for its body only once the handler accepted the header.
      // A body declared that small is waited for whole (a client may send it apart from its
      // header): the handler then gets all of it, and a submission with an Idempotency-Key
      // claims it in the step that makes the job, not in a round trip of its own first.
      if (r.has_body && !expect_continue) {
        Piece first(piece_budget);
        co_await body.read(first, kPrefetch, false,
                           r.content_length && *r.content_length <= kPrefetch);
        r.body.assign(first.view());
      }
      r.body_complete = body.done();
      // (No co_await inside ?: — GCC 12 miscompiles it.)
      std::optional<redis::Batcher::Outcome> sent;  // of the answer's commit, when it had one
      if (auto at_once = api.answer_at_once(r)) {
        resp = std::move(*at_once);
      } else {
        Handled h = co_await handle_and_commit(pool_for(r), [&] { return api.handle(r); });
        if (h.resp.answer) {
          resp = co_await answered(r, std::move(h));
        } else {
          resp = std::move(h.resp);
          sent = std::move(h.sent);
        }
      }
      if (resp.intake) {
        intake = std::move(resp.intake);
        const std::string route = resp.route;
        std::optional<Response> stopped;  // at a gate: a refusal, a replay
        if (resp.gate && sent) stopped = co_await pass_gates(*intake, std::move(*sent));
        if (stopped)
          resp = std::move(*stopped);
        else if (sent && !resp.gate)
          resp = co_await answer_commit(*intake, std::move(*sent));
        else  // (past its gates, the bytes read with the header are the intake's first)
          resp = co_await take_body(stream, body, *intake, expect_continue,
                                    resp.gate ? std::string_view(r.body) : "");
        resp.route = route;
      }
    } catch (const Malformed& bad) {
      log::info("malformed request body",
                {{"reason", bad.reason}, {"received_bytes", body.received()}});
      resp = error_response(400, "bad_request", "malformed HTTP request body: " + bad.reason);
    } catch (const Cut& cut) {
      log::warn("upload cut", {{"reason", cut.reason},
                               {"received_bytes", body.received()},
                               {"bytes_per_s", static_cast<std::int64_t>(body.rate())}});
      resp = error_response(408, "request_timeout", "the request body " + cut.reason);
    } catch (...) {
      failed = std::current_exception();  // the client went away: nothing to answer
    }
    if (intake && intake->settled()) {
      intake.reset();
    } else if (intake) {
      // Unfinished (the client went away, or a refusal), its undo blocks on storage and
      // Redis: it goes on the storage pool.
      co_await run_blocking(storing, [&] { intake.reset(); });
    }
    if (failed) {
      if (r.has_body && !body.done()) {
        std::string why = "unknown";
        try {
          std::rethrow_exception(failed);
        } catch (const std::exception& e) {
          why = e.what();
        }
        log::info("upload abandoned by the client", {{"target", r.target.substr(0, 200)},
                                                     {"received_bytes", body.received()},
                                                     {"error", why}});
      }
      std::rethrow_exception(failed);
    }
  }

  // Feeds the rest of an accepted body to its Intake as it arrives, then asks for the answer.
  // early: bytes of the body read before the handler ran that it did not take (it had the
  // intake admitted first), fed before the rest.
  asio::awaitable<Response> take_body(beast::tcp_stream& stream, BodyReader& body, Intake& intake,
                                      bool expect_continue, std::string_view early) {
    if (expect_continue) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream.expires_after(cfg.body_idle_timeout);
      co_await asio::async_write(stream, asio::buffer(kContinue.data(), kContinue.size()),
                                 asio::use_awaitable);
    }
    // The next piece is read while the last one is stored: the client and storage move at once.
    Piece piece(piece_budget), next(piece_budget);
    auto feed = [&]() -> std::optional<Response> {  // on the storage pool
      if (!early.empty())
        if (auto no = intake.write(std::exchange(early, {}))) return no;
      if (piece.empty()) return std::nullopt;
      return intake.write(piece.view());
    };
    std::optional<Response> refused;
    auto store = [&]() -> asio::awaitable<void> {
      if (piece.empty() && early.empty()) co_return;
      refused = co_await run_blocking(storing, feed);
      // Refused (too large, a bad form): answered now, not once the read under way ends — which
      // a client that stopped sending would make wait for body_idle_timeout, then lose the
      // answer to the cut.
      if (refused) body.abandon();
    };
    while (!body.done()) {
      next.clear();
      try {
        co_await (store() && body.read(next, kPiece, true));
      } catch (...) {
        if (!refused) throw;  // (with a refusal: the abandoned read's end)
      }
      if (refused) co_return std::move(*refused);
      std::swap(piece, next);
    }
    // The last piece stored and the answer asked for in one trip to the pool.
    Handled h = co_await handle_and_commit(storing, [&] {
      if (auto no = feed()) return std::move(*no);
      return intake.finish();
    });
    if (!h.sent) co_return std::move(h.resp);
    co_return co_await answer_commit(intake, std::move(*h.sent));
  }

  // Runs task on a pool thread. The task gets `back`, to call once with the result, from
  // whichever thread has it by then; the coroutine resumes with it on the I/O thread. (io keeps
  // running meanwhile: a guard goes out with the task and comes back with the result.)
  template <typename T, typename Task>
  asio::awaitable<T> hand_off(WorkPool& on, Task task) {
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(T)>(
        [this, &on, &task](auto handler) {
          auto resume = std::make_shared<decltype(handler)>(std::move(handler));
          auto back = [this, resume, work = asio::make_work_guard(io)](T result) {
            asio::post(io, [resume, work, r = std::move(result)]() mutable {
              std::move (*resume)(std::move(r));
            });
          };
          on.post([&task, back] { task(back); });
        },
        asio::use_awaitable);
  }

  // Runs f on a pool of blocking threads; the coroutine resumes on the I/O thread afterwards.
  template <typename F>
  asio::awaitable<std::invoke_result_t<F&>> run_blocking(WorkPool& on, F f) {
    using R = std::invoke_result_t<F&>;
    struct Out {
      std::optional<std::conditional_t<std::is_void_v<R>, std::monostate, R>> value;
      std::exception_ptr failed;
    };
    Out out = co_await hand_off<Out>(on, [&f](auto back) {
      Out o;
      try {
        if constexpr (std::is_void_v<R>) {
          f();
          o.value.emplace();
        } else {
          o.value.emplace(f());
        }
      } catch (...) {
        o.failed = std::current_exception();
      }
      back(std::move(o));
    });
    if (out.failed) std::rethrow_exception(out.failed);
    if constexpr (!std::is_void_v<R>) co_return std::move(*out.value);
  }

  // A handler's answer and, when it carried a commit (Intake::finish), that commit's outcome.
  struct Handled {
    Response resp;
    std::optional<redis::Batcher::Outcome> sent;
    std::exception_ptr failed;
  };

  // Runs f — a handler, blocking — on the pool `on`, like run_blocking. An answer carrying a
  // commit (a job's record) goes into the group commit from that thread, and the coroutine
  // resumes once the outcome is in: no thread waits for the round trip, and the batching thread
  // hands the outcome straight back to this (I/O) one.
  template <typename F>
  asio::awaitable<Handled> handle_and_commit(WorkPool& on, F f) {
    Handled h = co_await hand_off<Handled>(on, [this, &f](auto back) {
      Handled out;
      try {
        out.resp = f();
      } catch (...) {
        out.failed = std::current_exception();
      }
      if (out.resp.commit.empty()) return back(std::move(out));
      {  // counted: the server (its io) outlives every hand-back
        std::lock_guard lock(commits_mu);
        ++commits;
      }
      auto calls = std::move(out.resp.commit);
      auto held = std::make_shared<Handled>(std::move(out));
      api.group_commit()->submit(std::move(calls), [this, held, back](auto o) {
        held->sent = std::move(o);
        back(std::move(*held));
        std::lock_guard lock(commits_mu);
        if (--commits == 0) commits_cv.notify_all();
      });
    });
    if (h.failed) std::rethrow_exception(h.failed);
    co_return h;
  }

  // The API's answer to r, from a request thread; a read whose step went in the group commit
  // (Response::answer: a long-poll flagging its job) answered once its replies are in.
  asio::awaitable<Response> ask(const Request& r) {
    Handled h = co_await handle_and_commit(pool, [&] { return api.handle(r); });
    co_return co_await answered(r, std::move(h));
  }
  asio::awaitable<Response> answered(const Request& r, Handled h) {
    if (!h.resp.answer || !h.sent) co_return std::move(h.resp);
    const std::string route = h.resp.route;
    Response resp;
    if (!h.sent->error) {
      resp = h.resp.answer(std::move(h.sent->replies));  // (cheap: on the I/O thread)
    } else {
      Request again = r;  // the step again, on a request thread, with its retries left
      again.blocking = true;
      again.since = h.sent->queued;
      resp = co_await run_blocking(pool, [&] { return api.handle(again); });
    }
    resp.route = route;
    co_return resp;
  }

  // The answer to a submission whose job record went through the group commit: made here (it
  // is cheap), or, when the batch failed (or the answer needs a record read: a replay), by the
  // step again, blocking, on the storage pool.
  asio::awaitable<Response> answer_commit(Intake& intake, redis::Batcher::Outcome o) {
    if (!o.error)
      if (auto answer = intake.committed(std::move(o.replies))) co_return std::move(*answer);
    const auto since = o.error ? o.queued : std::chrono::steady_clock::time_point{};
    const bool lost = o.error && broke(o.error);
    co_return co_await run_blocking(storing, [&] { return intake.commit_again(since, lost); });
  }

  // Takes an intake through its gates (Intake::gated), the first one's outcome in hand: nullopt
  // once it passed them all, else the answer. Each gate's reply is read here; a next gate's
  // calls go into the group commit from the storage pool; a failed batch, or a gate that must
  // block (a replay reads a record), is left to gate_again() on the storage pool.
  asio::awaitable<std::optional<Response>> pass_gates(Intake& intake, redis::Batcher::Outcome o) {
    std::chrono::steady_clock::time_point since{};  // of a failed batch's step
    for (;;) {
      if (o.error) {
        since = o.queued;
        break;
      }
      std::optional<Response> next = intake.gated(std::move(o.replies));
      if (!next || !next->gate) co_return next;
      if (next->commit.empty()) break;
      Handled h = co_await handle_and_commit(storing, [&] { return std::move(*next); });
      o = std::move(*h.sent);
    }
    co_return co_await run_blocking(storing, [&] { return intake.gate_again(since); });
  }

  // Ends a connection once its answer is written: half-closed. A client still sending a body we
  // did not read (an early 401, 404, 413, a refused Transfer-Encoding) must get to read the
  // answer — closing now would reset the connection under it ("broken pipe") —, so the rest is
  // read and dropped: a bounded amount, for a bounded time.
  asio::awaitable<void> close_after_answer(beast::tcp_stream& stream, bool unread_body) {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (!unread_body) {
      co_await until_delivered(stream);
      co_return;
    }
    std::size_t total = 0;
    stream.expires_after(std::chrono::seconds(5));
    while (total < (64u << 20)) {
      beast::error_code ec;
      std::size_t n = co_await stream.async_read_some(
          asio::buffer(drain_sink), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;  // the client closed (it read the answer), or the time is up
      total += n;
    }
  }

  // Keeps a connection whose answer is still queued in the kernel (a download's last megabytes
  // to a slow reader) until the client has it: closed now, the socket would be an orphan with
  // data, which Linux drops first under TCP memory pressure ("TCP: out of memory") — the client
  // gets a cut answer. Waits while bytes are unacknowledged, at most as long as a download chunk
  // may take (max(body_idle_timeout, unsent / min_download_rate)), and not past a shutdown.
  asio::awaitable<void> until_delivered(beast::tcp_stream& stream) {
    const int fd = stream.socket().native_handle();
    auto unsent = [fd] {
      int n = 0;
      return ::ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 0;
    };
    const int queued = unsent();
    if (queued <= 0) co_return;
    const auto deadline =
        Clock::now() +
        std::max<std::chrono::milliseconds>(
            cfg.body_idle_timeout, std::chrono::milliseconds(static_cast<std::int64_t>(queued) *
                                                             1000 / cfg.min_download_rate));
    asio::steady_timer poll(io);
    while (!stopping.load() && Clock::now() < deadline && unsent() > 0) {
      // (A timer, not the stream's expiry: that one closes the socket when it fires.)
      poll.expires_after(std::chrono::milliseconds(50));
      beast::error_code ec;
      co_await poll.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  // Waits for timer — and while `watching`, for the client's connection to become readable,
  // whichever comes first. Readable with nothing to read is a client gone: thrown, as a write
  // to it would be. Readable with bytes is its next request, pipelined: the watch ends (false
  // returned), the request waits its turn.
  asio::awaitable<bool> wait_watching(asio::steady_timer& timer, tcp::socket& client,
                                      bool& watching) {
    beast::error_code ec;
    if (!watching) {
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      co_return true;
    }
    auto first_done = co_await (
        timer.async_wait(asio::redirect_error(asio::use_awaitable, ec)) ||
        client.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec)));
    if (first_done.index() == 0) co_return true;
    beast::error_code aec;
    if (client.available(aec) == 0)
      throw beast::system_error(aec ? aec : beast::error_code(asio::error::eof));
    watching = false;
    co_return false;
  }

  // Waits for the job's completion notice (or the deadline), then answers with its state. A
  // notice that is not the end (the notifier resubscribed and woke everyone) waits on. The
  // read that returned `first` flagged the job watched; an end announced before this
  // registration is one the notifier kept (Notifier: no second read here).
  // A notice that carries the job's ended record (a relay's finish announces it so) is the
  // answer, made here on the I/O thread (~20 µs) — no read, no trip to a request thread.
  // `resp` holds the first read's answer, and is given the last.
  asio::awaitable<void> long_poll(beast::tcp_stream& stream, const Request& r, Response& resp) {
    const auto wait_until = resp.wait_until;
    auto timer = std::make_shared<asio::steady_timer>(io, wait_until);
    auto woken = std::make_shared<bool>(false);
    auto notice = std::make_shared<std::string>();
    auto ex = io.get_executor();
    // (A wake from inside watch() is posted: it runs once this coroutine waits below.)
    auto reg = notifier.watch(resp.wait_job, [timer, woken, notice, ex](const std::string& n) {
      asio::post(ex, [timer, woken, notice, n] {
        *woken = true;
        // (The settle's notice of the same end often comes before this coroutine runs: the
        // record, when one came, is kept.)
        if (notice->empty() || notice->front() != '[') *notice = n;
        timer->cancel();
      });
    });
    // A client that went away ends the wait then, not at its deadline: it held its
    // connection's place under max_connections, and cost a read of the job for nobody.
    bool watch_client = true;
    for (;;) {
      if (!*woken) {  // (a notice during the last read is not lost: it set woken)
        if (!co_await wait_watching(*timer, stream.socket(), watch_client)) continue;
      }
      if (*woken && !stopping.load())
        if (auto ended = api.answer_from_notice(r, std::exchange(*notice, {}))) {
          resp = std::move(*ended);
          co_return;
        }
      if (stopping.load() || Clock::now() >= wait_until) {
        resp = co_await run_blocking(pool, [&] { return api.handle(r, /*again=*/true); });
        co_return;
      }
      *woken = false;
      resp = co_await ask(r);
      if (resp.wait_job.empty() || stopping.load()) co_return;
    }
  }

  // A job's live events (Server-Sent Events): the job's state now, then again each time the
  // notifier says it changed, until a terminal state. A comment every kKeepAlive keeps proxies
  // from cutting an idle stream and finds clients that went away. Costs a coroutine, a timer
  // and a registration: thousands are as cheap as long-polls.
  asio::awaitable<void> event_stream(beast::tcp_stream& stream, const Request& r,
                                     const Response& first) {
    static constexpr auto kKeepAlive = std::chrono::seconds(15);
    http::response<http::buffer_body> out{http::status::ok, 11};
    out.set(http::field::content_type, kEventStream);
    out.set(http::field::date, http_date());
    out.set(http::field::cache_control, "no-store");
    out.set("X-Accel-Buffering", "no");  // nginx: pass events on as they come
    for (auto& [k, v] : first.headers) out.set(k, v);
    out.keep_alive(false);
    out.chunked(true);
    out.body().data = nullptr;
    out.body().more = true;
    http::response_serializer<http::buffer_body> sr{out};
    stream.expires_after(cfg.body_idle_timeout);
    co_await http::async_write_header(stream, sr, asio::use_awaitable);
    auto send = [&](std::string text) -> asio::awaitable<void> {
      out.body().data = text.empty() ? nullptr : text.data();
      out.body().size = text.size();
      out.body().more = !text.empty();
      stream.expires_after(cfg.body_idle_timeout);
      try {
        co_await http::async_write(stream, sr, asio::use_awaitable);
      } catch (const beast::system_error& e) {
        if (e.code() != http::error::need_buffer) throw;
      }
    };

    auto timer = std::make_shared<asio::steady_timer>(io);
    auto woken = std::make_shared<bool>(false);
    auto ex = io.get_executor();
    auto reg = notifier.watch(
        first.event->job_id,
        [timer, woken, ex](const std::string&) {
          asio::post(ex, [timer, woken] {
            *woken = true;
            timer->cancel();
          });
        },
        /*every_change=*/true);
    std::string last_id = r.header("last-event-id");
    bool watch_client = true;  // (a client gone is found at once, not by a keep-alive's write)
    // Read again after registering: a change between the first read and now is not missed.
    Response cur = co_await run_blocking(pool, [&] { return api.handle(r, /*again=*/true); });
    for (;;) {
      if (!cur.event) {
        // The job is gone (expired) or the request no longer passes (a revoked key).
        co_await send("event: error\ndata: " + cur.body + "\n\n");
        break;
      }
      if (cur.event->id != last_id) {
        last_id = cur.event->id;
        co_await send("id: " + last_id + "\nevent: " + cur.event->name + "\ndata: " + cur.body +
                      "\n\n");
      }
      if (cur.event->terminal || stopping.load()) break;
      while (!*woken && !stopping.load()) {
        timer->expires_after(kKeepAlive);
        if (!co_await wait_watching(*timer, stream.socket(), watch_client)) continue;
        if (!*woken) co_await send(": keep-alive\n\n");
      }
      *woken = false;
      cur = co_await run_blocking(pool, [&] { return api.handle(r, /*again=*/true); });
    }
    co_await send("");  // the last chunk
  }

  // Writes an answer; to a HEAD, its header alone (the length the body would have, when known).
  asio::awaitable<void> write(beast::tcp_stream& stream, Response& resp, bool close,
                              bool head = false) {
    stream.expires_after(cfg.body_idle_timeout);
    if (head) {
      http::response<http::empty_body> out{static_cast<http::status>(resp.status), 11};
      if (!resp.content_type.empty()) out.set(http::field::content_type, resp.content_type);
      out.set(http::field::date, http_date());
      for (auto& [k, v] : resp.headers) out.set(k, v);
      out.keep_alive(!close);
      if (resp.stream) {
        if (auto n = resp.stream->size()) out.content_length(*n);
      } else if (resp.content_type != kEventStream) {
        out.content_length(resp.body.size());
      }
      co_await http::async_write(stream, out, asio::use_awaitable);
      co_return;
    }
    if (!resp.stream) {
      http::response<http::string_body> out{static_cast<http::status>(resp.status), 11};
      if (!resp.content_type.empty()) out.set(http::field::content_type, resp.content_type);
      out.set(http::field::date, http_date());
      for (auto& [k, v] : resp.headers) out.set(k, v);
      out.keep_alive(!close);
      out.body() = std::move(resp.body);
      // 204 and 304 have no body, and say no length either (RFC 9110 §8.6, §15.4.5).
      if (resp.status != 204 && resp.status != 304) out.prepare_payload();
      co_await http::async_write(stream, out, asio::use_awaitable);
      co_return;
    }
    // A stored object: streamed in chunks, read from storage on the storage pool.
    http::response<http::buffer_body> out{static_cast<http::status>(resp.status), 11};
    out.set(http::field::content_type, resp.content_type);
    out.set(http::field::date, http_date());
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
    for (;;) {
      // Each chunk is a piece of the upload pieces' budget (server.upload_buffer_memory), up to
      // 64 KiB while it has room, 16 KiB past it, and given back once written: a reader that
      // stalls holds its chunk meanwhile, and many of them (a chunk of 64 KiB each: 2,000
      // stalled downloads took 127 MiB) must not grow the gateway without bound.
      Piece chunk(piece_budget);
      const auto room = chunk.room(kDownloadChunk, kDownloadChunk);
      size_t n = co_await run_blocking(storing, [&] { return resp.stream->read(room); });
      out.body().data = n ? room.data() : nullptr;
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
  impl_->storing.join();
  impl_->probes.join();
  std::unique_lock lock(impl_->commits_mu);
  impl_->commits_cv.wait(lock, [this] { return impl_->commits == 0; });
}

void HttpServer::listen() {
  const std::string& l = impl_->cfg.listen;
  try {
    const auto a = config::listen_address("server.listen", l);
    tcp::endpoint ep(asio::ip::make_address(a.ip), a.port);
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
  if (impl_->stopping.load()) {
    // What the pools have not started serves connections that are gone (drained, or cut at the
    // deadline): dropped, so that the pools' join waits only for what runs now. (A stop of
    // waits on Redis, at the deadline, keeps that short; main.cpp bounds it all the same.)
    impl_->api.stop_waiting();
    const auto dropped = impl_->pool.discard_queued() + impl_->storing.discard_queued() +
                         impl_->probes.discard_queued();
    if (dropped > 0)
      log::warn("shutdown: requests queued for the pools dropped",
                {{"requests", static_cast<std::int64_t>(dropped)}});
  }
  return !impl_->failed;
}

const ConnectionBudget& HttpServer::connection_budget() const {
  return impl_->budget;
}

void HttpServer::stop() {
  asio::post(impl_->io, [this] {
    impl_->stopping = true;
    beast::error_code ec;
    impl_->acceptor.close(ec);
    // Long-polls answer now; in-flight requests finish, each answer closing its connection;
    // kept-alive connections that bring no request within kIdleGraceOnShutdown are closed, and
    // whatever is left is cut at the drain deadline. The I/O thread returns as soon as no
    // connection is left.
    impl_->notifier.wake_all();
    const auto now = Clock::now();
    impl_->drain(
        now + impl_->cfg.shutdown_timeout,
        now + std::min<Clock::duration>(kIdleGraceOnShutdown, impl_->cfg.shutdown_timeout));
  });
}

}  // namespace relay::gateway
