#include "common/time.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>

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

TEST(Rfc3339, RoundTripsEveryMillisecondShapeAndAgreesWithGmtime) {
  // Times from 1970 to 2100 in uneven steps: every field, leap days and year ends included.
  for (long long ms = 0; ms < 4'102'444'800'000LL; ms += 86'400'000LL * 3 + 3'723'457LL) {
    const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
    const std::string text = format_rfc3339(t);
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char expected[64];  // (room for any year the format could print: no truncation warning)
    std::snprintf(expected, sizeof expected, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                  tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms % 1000));
    ASSERT_EQ(text, expected);
    ASSERT_EQ(parse_rfc3339(text), t) << text;
  }
  EXPECT_EQ(format_rfc3339(std::chrono::system_clock::time_point(std::chrono::milliseconds(-1))),
            "1969-12-31T23:59:59.999Z");
}

TEST(Rfc3339, RefusesWhatItDoesNotWrite) {
  for (const char* bad :
       {"2025-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2025-11-31T00:00:00Z",
        "2025-11-30T24:00:00Z", "2025-11-30T23:60:00Z", "2025-11-30T00:00:00.12Z",
        "2025-11-30T00:00:00.1234Z", "2025-11-30T00:00:00", "2025-1-30T00:00:00Z",
        " 2025-11-30T00:00:00Z", "2025-11-30T00:00:00Z ", "+025-11-30T00:00:00Z", ""})
    EXPECT_FALSE(parse_rfc3339(bad).has_value()) << bad;
  EXPECT_TRUE(parse_rfc3339("2024-02-29T12:00:00Z").has_value()) << "a leap day";
}

}  // namespace
}  // namespace relay
