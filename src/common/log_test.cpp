#include "common/log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace relay::log {
namespace {

// What the calls in f wrote to stderr.
template <typename F>
std::string captured(F f) {
  std::fflush(stderr);
  char path[] = "/tmp/relay-log-test-XXXXXX";
  int fd = ::mkstemp(path);
  int saved = ::dup(2);
  ::dup2(fd, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

TEST(Log, JsonLinesCarryTheFieldsExactlyAndEscaped) {
  set_component("test");
  const std::string out = captured([] {
    info("job \"finished\"", {{"job_id", "j-1"},
                              {"size", 1024},
                              {"ratio", 0.5},
                              {"name", "caf\xc3\xa9 \n tab\t"},
                              {"list", boost::json::array{1, "two"}},
                              {"ok", true}});
  });
  ASSERT_FALSE(out.empty());
  ASSERT_EQ(out.back(), '\n');
  auto v = boost::json::parse(out).as_object();
  EXPECT_EQ(v.at("level").as_string(), "info");
  EXPECT_EQ(v.at("component").as_string(), "test");
  EXPECT_EQ(v.at("msg").as_string(), "job \"finished\"");
  EXPECT_EQ(v.at("job_id").as_string(), "j-1");
  EXPECT_EQ(v.at("size").as_int64(), 1024);
  EXPECT_EQ(v.at("ratio").as_double(), 0.5);
  EXPECT_EQ(v.at("name").as_string(), "caf\xc3\xa9 \n tab\t");
  EXPECT_EQ(v.at("list").as_array().size(), 2u);
  EXPECT_TRUE(v.at("ok").as_bool());
  EXPECT_TRUE(v.at("ts").as_string().ends_with("Z"));
}

TEST(Log, ATraceScopeAddsTheJobsTraceIdAndAFieldOfOurNameReplacesOurs) {
  const std::string out = captured([] {
    TraceScope scope("j-2", "0af7651916cd43dd8448eb211c80319c");
    info("working", {{"job_id", "j-2"}});
    info("other", {{"job_id", "j-3"}});
    warn("renamed", {{"msg", "theirs"}, {"level", "custom"}});
  });
  std::istringstream lines(out);
  std::string line;
  std::vector<boost::json::object> got;
  while (std::getline(lines, line)) got.push_back(boost::json::parse(line).as_object());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].at("trace_id").as_string(), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_FALSE(got[1].contains("trace_id"));
  EXPECT_EQ(got[2].at("msg").as_string(), "theirs");
  EXPECT_EQ(got[2].at("level").as_string(), "custom");
}

TEST(Log, LinesBelowTheLevelAreNotWritten) {
  set_level("warn");
  const std::string out = captured([] {
    info("quiet");
    warn("loud");
  });
  set_level("info");
  EXPECT_EQ(out.find("quiet"), std::string::npos);
  EXPECT_NE(out.find("loud"), std::string::npos);
}

// What stderr (a file here) holds so far.
std::string written_so_far() {
  std::ifstream in("/proc/self/fd/2");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A Deferred's lines reach stderr when the outermost one ends, whole and in order; past 64 KiB
// they go out meanwhile.
TEST(Log, DeferredLinesAreWrittenTogetherWhenTheOutermostEnds) {
  std::string during, after_inner;
  const std::string out = captured([&] {
    Deferred batch;
    info("one");
    {
      Deferred inner;
      info("two");
    }
    after_inner = written_so_far();
    for (int i = 0; i < 2000; ++i) info("many", {{"i", i}});  // ~170 KiB
    during = written_so_far();
  });
  EXPECT_EQ(after_inner, "") << "held until the outermost ends";
  EXPECT_GE(during.size(), 64u * 1024) << "written meanwhile past 64 KiB";
  std::istringstream lines(out);
  std::string line;
  std::vector<std::string> msgs;
  int next = 0;
  while (std::getline(lines, line)) {
    auto o = boost::json::parse(line).as_object();
    msgs.emplace_back(o.at("msg").as_string());
    if (msgs.back() == "many") {
      EXPECT_EQ(o.at("i").as_int64(), next++);
    }
  }
  ASSERT_EQ(msgs.size(), 2002u);
  EXPECT_EQ(msgs[0], "one");
  EXPECT_EQ(msgs[1], "two");
  EXPECT_EQ(next, 2000);
}

// Lines from many threads at once reach a pipe (a container's log) whole and each thread's in
// order, the long ones too: a write of more than PIPE_BUF bytes to a pipe may be split around
// other writers' (this fails when long lines are written without the exclusive lock).
TEST(Log, LinesFromManyThreadsReachAPipeWhole) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, n);
  });
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fds[1], 2);
  ::close(fds[1]);
  constexpr int kThreads = 6, kLines = 150;
  {
    std::vector<std::jthread> writers;
    for (int t = 0; t < kThreads; ++t)
      writers.emplace_back([t] {
        for (int i = 0; i < kLines; ++i) {
          const std::size_t pad = i % 3 == 0 ? 20000 : i % 3 == 1 ? 3000 : 10;
          info("line", {{"thread", t}, {"seq", i}, {"pad", std::string(pad, 'a' + t)}});
        }
      });
  }
  ::dup2(saved, 2);  // the pipe's last write end closes: the reader sees its end
  ::close(saved);
  reader.join();
  std::istringstream lines(got);
  std::string line;
  std::vector<int> next(kThreads, 0);
  int count = 0;
  while (std::getline(lines, line)) {
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    ASSERT_FALSE(ec) << "line " << count << " is not whole: " << line.substr(0, 120);
    const auto& o = v.as_object();
    const int t = static_cast<int>(o.at("thread").as_int64());
    EXPECT_EQ(o.at("seq").as_int64(), next[t]++) << "thread " << t << "'s lines in order";
    EXPECT_EQ(o.at("pad").as_string().find_first_not_of(static_cast<char>('a' + t)),
              std::string::npos);
    ++count;
  }
  EXPECT_EQ(count, kThreads * kLines);
}

}  // namespace
}  // namespace relay::log
