#include "gateway/submission.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

SubmissionRules rules() {
  SubmissionRules r;
  r.service_type = "asr";
  r.operations = {"transcribe", "translate"};
  r.webhooks_configured = true;
  r.check_callback = [](const std::string& url) -> std::optional<http::DestinationProblem> {
    if (url.find("10.0.0.1") != std::string::npos) return http::DestinationProblem{"private"};
    if (url.find("slow-dns") != std::string::npos)
      return http::DestinationProblem{"did not resolve in time", /*transient=*/true};
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
  // A host that cannot be resolved now is not the client's fault, nor final: 503.
  c.callback_url = "https://slow-dns.example.com/hook";
  ASSERT_TRUE(validate(c, rules()));
  EXPECT_EQ(validate(c, rules())->status, 503u);
  EXPECT_EQ(code_of(c), "callback_url_unresolved");
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

TEST(Submission, WebhookEventsAreKnownNamesWithACallback) {
  Submission s;
  s.callback_url = "https://hooks.example.com/x";
  for (const char* ok : {"terminal", "started", "progress,terminal", " started , progress "}) {
    s.webhook_events = ok;
    EXPECT_EQ(code_of(s), "") << ok;
  }
  for (const char* bad : {"done", "started,", ",", "terminal;started", "STARTED"}) {
    s.webhook_events = bad;
    EXPECT_EQ(code_of(s), "invalid_webhook_events") << bad;
  }
  Submission no_callback;
  no_callback.webhook_events = "started";
  EXPECT_EQ(code_of(no_callback), "invalid_webhook_events");
}

TEST(Submission, WebhookEventsAreStoredInOneOrderWithoutTheDefault) {
  EXPECT_EQ(normalized_webhook_events("terminal"), "");
  EXPECT_EQ(normalized_webhook_events(""), "");
  EXPECT_EQ(normalized_webhook_events("progress, started,terminal"), "terminal,started,progress");
  EXPECT_EQ(normalized_webhook_events("started,started"), "started");
  EXPECT_EQ(normalized_webhook_events("progress"), "progress");
}

TEST(Submission, InputUrlsOnlyUnderTheServiceTypesPrefixes) {
  SubmissionRules r = rules();
  r.input_urls = {"s3://media/calls/", "https://cdn.example.com/public/"};
  r.check_input_host = [](const std::string& url) -> std::optional<http::DestinationProblem> {
    if (url.find("internal") != std::string::npos) return http::DestinationProblem{"private"};
    if (url.find("slow-dns") != std::string::npos)
      return http::DestinationProblem{"did not resolve in time", /*transient=*/true};
    return std::nullopt;
  };
  Submission s;
  for (const char* ok : {"s3://media/calls/a.wav", "https://cdn.example.com/public/a.wav?sig=1"}) {
    s.input_url = ok;
    EXPECT_EQ(code_of(s, r), "") << ok;
  }
  for (const char* no : {"s3://media/other/a.wav", "s3://media/calls-evil/a.wav",
                         "https://cdn.example.com/private/a", "https://evil.com/public/a"}) {
    s.input_url = no;
    EXPECT_EQ(code_of(s, r), "input_url_not_allowed") << no;
  }
  for (const char* bad :
       {"http://cdn.example.com/public/a", "file:///etc/passwd", "s3://media", "s3:///key",
        "s3://media/calls/../secret", "https://cdn.example.com/public/%2E%2E/x",
        "https://cdn.example.com/public/./x", "s3://media/calls/..", "ftp://x/y"}) {
    s.input_url = bad;
    EXPECT_EQ(code_of(s, r), "invalid_input_url") << bad;
  }
  r.input_urls.push_back("https://internal.example.com/");
  s.input_url = "https://internal.example.com/a";
  EXPECT_EQ(code_of(s, r), "input_url_not_allowed") << "the host check";
  r.input_urls.push_back("https://slow-dns.example.com/");
  s.input_url = "https://slow-dns.example.com/a";
  ASSERT_TRUE(validate(s, r));
  EXPECT_EQ(validate(s, r)->status, 503u);
  EXPECT_EQ(code_of(s, r), "input_url_unresolved");
  s.input_url = "s3://media/calls/a.wav";
  EXPECT_EQ(code_of(s, rules()), "input_url_not_allowed") << "no prefixes: uploads only";
}

}  // namespace
}  // namespace relay::gateway
