#include "gateway/byte_range.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

// The bytes a Range field names in a representation of `size` bytes, as "first+length", or
// "ignored" (served whole) or "416".
std::string served(std::string_view range, std::uint64_t size) {
  auto spec = parse_range(range);
  if (!spec) return "ignored";
  auto span = resolve_range(*spec, size);
  if (!span) return "416";
  return std::to_string(span->first) + "+" + std::to_string(span->length);
}

TEST(ByteRange, OneRangeInEachFormIsResolvedAgainstTheSize) {
  EXPECT_EQ(served("bytes=0-9", 100), "0+10");
  EXPECT_EQ(served("bytes=10-", 100), "10+90");
  EXPECT_EQ(served("bytes=-5", 100), "95+5");
  EXPECT_EQ(served("bytes=99-99", 100), "99+1");
  EXPECT_EQ(served("bytes=0-0", 1), "0+1");
  // A last byte past the end is the end; a suffix longer than the whole is the whole.
  EXPECT_EQ(served("bytes=50-1000", 100), "50+50");
  EXPECT_EQ(served("bytes=-1000", 100), "0+100");
  // The unit in any case, blanks around the range and empty list elements (RFC 9110 §5.6.1).
  EXPECT_EQ(served("Bytes=0-1", 100), "0+2");
  EXPECT_EQ(served(" bytes= 3-4 ", 100), "3+2");
  EXPECT_EQ(served("bytes=, 3-4,", 100), "3+2");
  // Numbers as large as 64 bits hold.
  EXPECT_EQ(served("bytes=18446744073709551614-", 100), "416");
}

TEST(ByteRange, ARangeThatNamesNoByteIs416) {
  EXPECT_EQ(served("bytes=100-", 100), "416");
  EXPECT_EQ(served("bytes=100-200", 100), "416");
  EXPECT_EQ(served("bytes=-0", 100), "416");
}

TEST(ByteRange, WhatIsNotOneValidByteRangeIsIgnored) {
  for (const char* v :
       {"", "bytes", "bytes=", "bytes=-", "bytes=5", "bytes=a-b", "bytes=1-a", "bytes=+1-2",
        "bytes=1--2", "bytes=-1-2", "bytes=5-3", "bytes=0-1,5-6", "bytes=0-1, -3", "items=0-1",
        "bytes 0-1", "bytes=0x1-2", "bytes=18446744073709551616-", "bytes=1 -2", "bytess=1-2"})
    EXPECT_EQ(served(v, 100), "ignored") << v;
}

TEST(ByteRange, IfRangeHoldsOnlyForTheCurrentStrongTag) {
  EXPECT_TRUE(if_range_holds("", "\"j1\""));
  EXPECT_TRUE(if_range_holds("\"j1\"", "\"j1\""));
  EXPECT_TRUE(if_range_holds(" \"j1\" ", "\"j1\""));
  EXPECT_FALSE(if_range_holds("\"j2\"", "\"j1\""));
  EXPECT_FALSE(if_range_holds("W/\"j1\"", "\"j1\"")) << "If-Range compares strongly";
  EXPECT_FALSE(if_range_holds("Wed, 21 Oct 2015 07:28:00 GMT", "\"j1\"")) << "a date: whole";
}

TEST(ByteRange, IfNoneMatchNamesTheTagOrAnything) {
  EXPECT_TRUE(none_match("\"j1\"", "\"j1\""));
  EXPECT_TRUE(none_match("W/\"j1\"", "\"j1\"")) << "If-None-Match compares weakly";
  EXPECT_TRUE(none_match("\"x\", \"j1\"", "\"j1\""));
  EXPECT_TRUE(none_match("*", "\"j1\""));
  EXPECT_FALSE(none_match("", "\"j1\""));
  EXPECT_FALSE(none_match("\"x\", \"j2\"", "\"j1\""));
  EXPECT_FALSE(none_match("j1", "\"j1\"")) << "an unquoted tag is not the tag";
}

}  // namespace
}  // namespace relay::gateway
