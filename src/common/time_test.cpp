#include "common/time.hpp"

#include <gtest/gtest.h>

namespace relay {
namespace {

TEST(ParseDuration, AcceptsTheDocumentedForms) {
  struct Case {
    const char* text;
    long long ms;
  } cases[] = {
      {"250ms", 250},    {"60s", 60'000}, {"5m", 300'000},
      {"1h", 3'600'000}, {"90", 90'000},  // a bare number is seconds
      {"1.5s", 1500},    {"0", 0},        {"0.25", 250},
  };
  for (const auto& c : cases) {
    auto d = parse_duration(c.text);
    ASSERT_TRUE(d.has_value()) << c.text;
    EXPECT_EQ(d->count(), c.ms) << c.text;
  }
}

TEST(ParseDuration, RejectsEverythingElse) {
  for (const char* bad : {"", "ms", "s", "-1s", "1x", "1 s", "abc", "1e400", "5mm", "nan", "inf"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
}

TEST(FormatDuration, RoundTrips) {
  for (long long ms : {0LL, 250LL, 1000LL, 60'000LL, 90'000LL, 3'600'000LL}) {
    auto text = format_duration(Millis(ms));
    EXPECT_EQ(parse_duration(text)->count(), ms) << text;
  }
}

TEST(Rfc3339, FormatsUtcWithMillisecondsAndParsesBack) {
  auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'764'460'800'123LL));
  EXPECT_EQ(format_rfc3339(t), "2025-11-30T00:00:00.123Z");
  EXPECT_EQ(parse_rfc3339("2025-11-30T00:00:00.123Z"), t);
  EXPECT_EQ(parse_rfc3339("2025-11-30T00:00:00Z"), t - std::chrono::milliseconds(123));
  EXPECT_FALSE(parse_rfc3339("2025-11-30 00:00:00").has_value());
  EXPECT_FALSE(parse_rfc3339("garbage").has_value());
}

}  // namespace
}  // namespace relay
