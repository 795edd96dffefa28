#include "sidecar/inference_client.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "common/errors.hpp"
#include "sidecar/spool.hpp"

namespace relay::sidecar {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A model server that does, on each connection it accepts, what the test tells it to (the
// request is read first), on a real loopback socket.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(int fd)> on_request) : script_(std::move(on_request)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(listener_, 8) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::jthread([this](std::stop_token st) {
      while (!st.stop_requested()) {
        int fd = ::accept(listener_, nullptr, nullptr);
        if (fd < 0) return;
        for (std::string req; req.find("\r\n\r\n") == std::string::npos;) {
          char b[512];
          ssize_t n = ::recv(fd, b, sizeof b, 0);
          if (n <= 0) break;
          req.append(b, static_cast<size_t>(n));
        }
        script_(fd);
        ::close(fd);
      }
    });
  }
  ~ScriptedServer() {
    thread_.request_stop();
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void(int)> script_;
  int listener_ = -1;
  int port_ = 0;
  std::jthread thread_;
};

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

TEST(InferenceClient, RejectsNonHttpUrls) {
  EXPECT_THROW(InferenceClient("https://x:1"), std::invalid_argument);
  EXPECT_THROW(InferenceClient("nonsense"), std::invalid_argument);
  EXPECT_NO_THROW(InferenceClient("http://127.0.0.1:9000"));
}

TEST(InferenceClient, NothingListeningProbesAsZero) {
  InferenceClient c("http://127.0.0.1:1");
  EXPECT_EQ(c.probe("/health", std::chrono::milliseconds(500), {}), 0);
}

TEST(InferenceClient, ProbeReadsTheStatusAndKeepsTheConnection) {
  std::atomic<int> connections{0};
  ScriptedServer server([&](int fd) {
    ++connections;
    // Two requests on one connection: the second probe must reuse it.
    send_all(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nwait");
    char b[512];
    if (::recv(fd, b, sizeof b, 0) > 0)
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  InferenceClient c(server.url());
  EXPECT_EQ(c.probe("/health", milliseconds(2000), {}), 503);
  EXPECT_EQ(c.probe("/health", milliseconds(2000), {}), 200);
  EXPECT_EQ(connections, 1);
}

TEST(InferenceClient, ProbeReadsAnAnswerInPiecesAndOneEndedByClose) {
  ScriptedServer server([](int fd) {
    for (char ch : std::string("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nfine")) {
      send_all(fd, std::string_view(&ch, 1));
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  InferenceClient c(server.url());
  EXPECT_EQ(c.probe("/health", milliseconds(5000), {}), 200);
}

// A model closing the connection before it answers, or partway through its header (restarting,
// say), probes as not ready, at once; the next probe connects afresh and reads its answer.
TEST(InferenceClient, ProbeOfAConnectionClosedBeforeOrMidAnswerIsZero) {
  std::atomic<int> connection{0};
  ScriptedServer server([&](int fd) {
    switch (connection++) {
      case 0:  // closed with nothing said
        break;
      case 1:  // closed partway through the header
        send_all(fd, "HTTP/1.1 200 OK\r\nContent-Len");
        break;
      default:
        send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
  });
  InferenceClient c(server.url());
  const auto t0 = Clock::now();
  EXPECT_EQ(c.probe("/health", milliseconds(10'000), {}), 0);
  EXPECT_EQ(c.probe("/health", milliseconds(10'000), {}), 0);
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));  // not the deadlines
  EXPECT_EQ(c.probe("/health", milliseconds(10'000), {}), 200);
  EXPECT_EQ(connection, 3);
}

TEST(InferenceClient, ProbeGivesUpAtItsDeadlineOnATrickleOrSilence) {
  // A header that never ends, one byte every 100 ms: each byte is progress, the deadline holds.
  for (bool trickle : {true, false}) {
    std::atomic<bool> done{false};
    ScriptedServer server([&](int fd) {
      for (int i = 0; i < 60 && !done; ++i) {
        if (trickle) send_all(fd, i == 0 ? "HTTP/1.1 200 OK\r\nX: " : "y");
        std::this_thread::sleep_for(milliseconds(100));
      }
    });
    InferenceClient c(server.url());
    const auto t0 = Clock::now();
    EXPECT_EQ(c.probe("/health", milliseconds(500), {}), 0) << trickle;
    const auto took = Clock::now() - t0;
    EXPECT_GE(took, milliseconds(450)) << trickle;
    EXPECT_LT(took, milliseconds(3000)) << trickle;  // not the server's 6 s
    done = true;
  }
}

TEST(InferenceClient, ProbeStopsAtOnceOnAStopRequest) {
  std::atomic<bool> done{false};
  ScriptedServer server([&](int) {
    while (!done) std::this_thread::sleep_for(milliseconds(10));
  });
  InferenceClient c(server.url());
  std::stop_source stop;
  std::jthread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  const auto t0 = Clock::now();
  EXPECT_THROW(c.probe("/health", milliseconds(10'000), stop.get_token()), Aborted);
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));  // not the 10 s deadline
  done = true;
}

// Request timeouts are alarms on a clock the relay shares: one that was disarmed must never cut
// a later request (whose socket may have the same descriptor), and one that rings cuts its own.
TEST(InferenceClient, APostTimesOutByItsAlarmAndNoEarlierAlarmCutsALaterPost) {
  std::atomic<int> connection{0};
  std::atomic<bool> done{false};
  ScriptedServer server([&](int fd) {
    switch (connection++) {
      case 0:  // at once
        send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
        break;
      case 1:  // well after the first request's timeout would have rung
        std::this_thread::sleep_for(milliseconds(600));
        send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
        break;
      default:  // silence
        while (!done) std::this_thread::sleep_for(milliseconds(10));
    }
  });
  AlarmClock alarms;
  InferenceClient c(server.url(), {}, &alarms);
  auto post = [&](milliseconds timeout) {
    MemorySource input("input");
    InferenceRequest r{.path = "/predict", .filename = "in.txt", .content_type = "text/plain"};
    r.body = &input;
    r.timeout = timeout;
    return c.post(r, {});
  };
  EXPECT_EQ(post(milliseconds(200)).status, 200);
  EXPECT_EQ(post(milliseconds(0)).status, 200);
  try {
    post(milliseconds(200));
    ADD_FAILURE() << "the silent server's request should time out";
  } catch (const InferenceError& e) {
    EXPECT_EQ(e.code(), "inference_timeout") << e.what();
  }
  done = true;
}

// The caller's work while the model works: `sent` once the request is out, `late` once if the
// answer has not begun by the time `sent` named — never for an answer in time, nor when `sent`
// names no time — and the answer read whole either way.
TEST(InferenceClient, LateIsCalledOnceWhenTheAnswerHasNotBegunByItsTime) {
  std::atomic<int> connection{0};
  ScriptedServer server([&](int fd) {
    // The first answer at once, the others after 400 ms.
    if (connection++ > 0) std::this_thread::sleep_for(milliseconds(400));
    send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
  });
  InferenceClient c(server.url());
  struct Seen {
    int sent = 0, late = 0;
    Clock::time_point sent_at, late_at;
  };
  auto post = [&](std::optional<milliseconds> patience) {
    Seen seen;
    MemorySource input("input");
    InferenceRequest r{.path = "/predict", .filename = "in.txt", .content_type = "text/plain"};
    r.body = &input;
    r.while_model_works.sent = [&]() -> std::optional<Clock::time_point> {
      ++seen.sent;
      seen.sent_at = Clock::now();
      if (!patience) return std::nullopt;
      return seen.sent_at + *patience;
    };
    r.while_model_works.late = [&] {
      ++seen.late;
      seen.late_at = Clock::now();
    };
    auto answer = c.post(r, {});
    EXPECT_EQ(answer.status, 200);
    EXPECT_EQ(answer.body.head(10), "ok");
    return seen;
  };
  auto in_time = post(milliseconds(5000));  // answered at once
  EXPECT_EQ(in_time.sent, 1);
  EXPECT_EQ(in_time.late, 0);
  auto late = post(milliseconds(100));  // answered after 400 ms
  EXPECT_EQ(late.sent, 1);
  ASSERT_EQ(late.late, 1);
  EXPECT_GE(late.late_at - late.sent_at, milliseconds(100));
  auto past = post(milliseconds(-50));  // a time already past: at once
  EXPECT_EQ(past.late, 1);
  auto none = post(std::nullopt);
  EXPECT_EQ(none.sent, 1);
  EXPECT_EQ(none.late, 0);
}

// Interim answers (1xx) before the final one are passed over, by probes and posts alike: taken
// for the answer, a job failed on "HTTP 103" and the real answer stayed on the kept-alive
// connection, where the next request read it as its own.
TEST(InferenceClient, InterimAnswersArePassedOverForTheFinalOne) {
  std::atomic<int> connections{0};
  ScriptedServer server([&](int fd) {
    ++connections;
    // The probe's answer, after an Early Hints; then the posts' (each request's header read up
    // to its end: a post's body is read along with the next header).
    send_all(fd,
             "HTTP/1.1 103 Early Hints\r\nLink: </m.bin>; rel=preload\r\n\r\n"
             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    const std::string answers[] = {
        "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"};
    std::string in;
    for (const auto& answer : answers) {
      for (size_t post; (post = in.find("POST ")) == std::string::npos ||
                        in.find("\r\n\r\n", post) == std::string::npos;) {
        char b[4096];
        ssize_t n = ::recv(fd, b, sizeof b, 0);
        if (n <= 0) return;
        in.append(b, static_cast<size_t>(n));
      }
      in.erase(0, in.find("\r\n\r\n", in.find("POST ")) + 4);
      send_all(fd, answer);
    }
  });
  InferenceClient c(server.url());
  EXPECT_EQ(c.probe("/health", milliseconds(2000), {}), 200);
  auto post = [&] {
    MemorySource input("input");
    InferenceRequest r{.path = "/predict", .filename = "in.txt", .content_type = "text/plain"};
    r.body = &input;
    return c.post(r, {});
  };
  auto first = post();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body.head(100), "first");
  auto second = post();
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body.head(100), "second");
  EXPECT_EQ(connections, 1) << "one kept-alive connection throughout";
}

// A model that refuses the input before reading it all (413 from a body limit, as a proxy in
// front of it answers) and closes: the relay's upload fails, and the answer, sent before the
// close, is what the job gets — not "unreachable".
TEST(InferenceClient, AnAnswerSentBeforeTheInputWasReadIsTheAnswer) {
  std::atomic<int> connection{0};
  ScriptedServer server([&](int fd) {
    if (connection++ == 0)
      send_all(fd,
               "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: 8\r\n"
               "\r\ntoo big!");
    // (then: closed with no answer, the input unread — a model that died)
  });
  InferenceClient c(server.url());
  auto post = [&] {
    MemorySource input(std::string(32 << 20, 'x'));
    InferenceRequest r{.path = "/predict", .filename = "in.bin", .content_type = "text/plain"};
    r.body = &input;
    return c.post(r, {});
  };
  try {
    auto answer = post();
    EXPECT_EQ(answer.status, 413);
    EXPECT_EQ(answer.body.head(100), "too big!");
  } catch (const InferenceError& e) {
    ADD_FAILURE() << e.code() << ": " << e.what();
  }
  try {
    post();
    ADD_FAILURE() << "an upload cut with no answer was taken as answered";
  } catch (const InferenceError& e) {
    EXPECT_EQ(e.code(), "inference_unreachable") << e.what();
    EXPECT_NE(std::string(e.what()).find("sending the input"), std::string::npos) << e.what();
  }
}

// relay.max_result_size: an answer over the limit fails as result_too_large however it is framed
// (a declared length, chunks, or bytes until the connection closes), and one at the limit is
// read whole.
TEST(InferenceClient, AnAnswerOverTheSizeLimitIsRefusedHoweverItIsFramed) {
  const std::string body(2000, 'x');
  std::atomic<int> connection{0};
  ScriptedServer server([&](int fd) {
    switch (connection++) {
      case 0:
        send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + body);
        break;
      case 1:
        send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < 4; ++i) send_all(fd, "1f4\r\n" + body.substr(0, 500) + "\r\n");
        send_all(fd, "0\r\n\r\n");
        break;
      case 2:
        send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body);
        break;
      default:
        send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1000\r\n\r\n" +
                         body.substr(0, 1000));
    }
  });
  InferenceClient c(server.url());
  auto post = [&] {
    MemorySource input("input");
    InferenceRequest r{.path = "/predict", .filename = "in.txt", .content_type = "text/plain"};
    r.body = &input;
    r.max_answer_size = 1000;
    return c.post(r, {});
  };
  for (const char* framing : {"Content-Length", "chunked", "until close"}) {
    try {
      post();
      ADD_FAILURE() << framing << ": an answer over the limit was read";
    } catch (const InferenceError& e) {
      EXPECT_EQ(e.code(), "result_too_large") << framing << ": " << e.what();
    }
  }
  auto at_limit = post();
  EXPECT_EQ(at_limit.status, 200);
  EXPECT_EQ(at_limit.body.size(), 1000u);
}

TEST(Spool, SmallBodiesStayInMemoryLargeOnesSpillAndReadBackWhole) {
  for (size_t size : {size_t{0}, size_t{10}, Spool::kMemoryLimit, Spool::kMemoryLimit + 1,
                      3 * Spool::kMemoryLimit + 7}) {
    Spool s;
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 31);
    for (size_t off = 0; off < size; off += 1000)
      s.write(data.data() + off, std::min<size_t>(1000, size - off));
    EXPECT_EQ(s.size(), size);
    auto r = s.reader();
    std::string back, buf(4096, '\0');
    while (size_t n = r->read(buf)) back.append(buf.data(), n);
    EXPECT_EQ(back, data) << size;
    EXPECT_EQ(s.head(5), data.substr(0, 5));
  }
}

// The start-up check refuses what a large answer could not be spooled into, naming it, and
// creates nothing where it accepts.
TEST(Spool, CheckDirAcceptsOnlyADirectoryItMayCreateFilesIn) {
  std::string dir = (std::filesystem::temp_directory_path() / "relay-spool-test-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  EXPECT_NO_THROW(Spool::check_dir(dir));
  EXPECT_TRUE(std::filesystem::is_empty(dir));

  auto refused = [](const std::string& d) -> std::string {
    try {
      Spool::check_dir(d);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refused(dir + "/missing").find(dir + "/missing: No such file or directory"),
            std::string::npos);
  std::ofstream(dir + "/file") << "x";
  EXPECT_NE(refused(dir + "/file").find(dir + "/file is not a directory"), std::string::npos);
  if (::geteuid() != 0) {  // (root may write anywhere but on a read-only file system)
    std::filesystem::create_directory(dir + "/ro");
    std::filesystem::permissions(
        dir + "/ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_NE(refused(dir + "/ro").find("Permission denied"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace relay::sidecar
