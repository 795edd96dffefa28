#include "common/log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace relay::log
