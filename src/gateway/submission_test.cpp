#include "gateway/submission.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

SubmissionRules rules() {
  SubmissionRules r;
  r.service_type = "asr";
  r.operations = {"transcribe", "translate"};
  r.webhooks_configured = true;
  r.check_callback = [](const std::string& url) -> std::optional<std::string> {
    if (url.find("10.0.0.1") != std::string::npos) return "private address";
    return std::nullopt;
  };
  return r;
}

std::string code_of(const Submission& s, const SubmissionRules& r = rules()) {
  auto refusal = validate(s, r);
  return refusal ? refusal->code : "";
}

TEST(Submission, OptionsAreSetByNameAndOthersIgnored) {
  Submission s;
  EXPECT_TRUE(s.set("operation", "transcribe"));
  EXPECT_TRUE(s.set("params", "{}"));
  EXPECT_TRUE(s.set("callback_url", "https://x"));
  EXPECT_TRUE(s.set("filename", "a.wav"));
  EXPECT_FALSE(s.set("file", "x"));
  EXPECT_FALSE(s.set("other", "x"));
  EXPECT_EQ(s.operation, "transcribe");
  EXPECT_EQ(s.filename, "a.wav");
  EXPECT_EQ(max_field_size("params"), 64u * 1024);
  EXPECT_EQ(max_field_size("file"), 0u);
  EXPECT_EQ(max_field_size("unknown"), 0u);
}

TEST(Submission, AValidSubmissionPasses) {
  Submission s;
  EXPECT_EQ(code_of(s), "") << "no options at all";
  s.operation = "translate";
  s.params = R"({"language":"en","n":0.1})";
  s.callback_url = "https://hooks.example.com/relay";
  EXPECT_EQ(code_of(s), "");
  auto any = rules();
  any.operations.clear();
  s.operation = "anything";
  EXPECT_EQ(code_of(s, any), "") << "no operation list: any operation";
}

TEST(Submission, EachRuleRefusesWithItsCode) {
  Submission s;
  s.operation = "summarise";
  EXPECT_EQ(code_of(s), "invalid_operation");
  s.operation = std::string(129, 'o');
  auto any = rules();
  any.operations.clear();
  EXPECT_EQ(code_of(s, any), "invalid_operation") << "too long even when any is allowed";

  for (const char* bad : {"[1,2]", "\"text\"", "{", "{} {}", "nan"}) {
    Submission p;
    p.params = bad;
    EXPECT_EQ(code_of(p), "invalid_params") << bad;
  }

  Submission c;
  c.callback_url = "https://10.0.0.1/hook";
  EXPECT_EQ(code_of(c), "invalid_callback_url");
  c.callback_url = "https://example.com/" + std::string(2100, 'a');
  EXPECT_EQ(code_of(c), "invalid_callback_url");
  auto unsigned_rules = rules();
  unsigned_rules.webhooks_configured = false;
  c.callback_url = "https://example.com/hook";
  EXPECT_EQ(code_of(c, unsigned_rules), "webhooks_not_configured");
  auto refusal = validate(c, unsigned_rules);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 400u);
}

// Deadlines: durations, positive, at most 30 days; as written ("90" is seconds).
TEST(Submission, DeadlinesAreBoundedDurations) {
  for (const char* name : {"ttl", "timeout"}) {
    for (const char* good : {"90", "90s", "1500ms", "15m", "2h", "720h"}) {
      Submission s;
      ASSERT_TRUE(s.set(name, good));
      EXPECT_EQ(code_of(s), "") << name << "=" << good;
    }
    for (const char* bad : {"0", "-1s", "soon", "721h", "1d", "", "5 s"}) {
      Submission s;
      s.set(name, bad);
      if (*bad == '\0') continue;  // not given
      EXPECT_EQ(code_of(s), std::string("invalid_") + name) << name << "=" << bad;
    }
  }
  EXPECT_EQ(deadline_option("90"), std::chrono::seconds(90));
  EXPECT_EQ(deadline_option("1500ms"), std::chrono::milliseconds(1500));
  EXPECT_EQ(deadline_option(""), std::nullopt);
}

}  // namespace
}  // namespace relay::gateway
