#include "common/utf8.hpp"

#include <gtest/gtest.h>

namespace relay {
namespace {

TEST(Utf8Clean, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(utf8_clean("caf\xC3\xA9.txt", 255), "caf\xC3\xA9.txt");
  EXPECT_EQ(utf8_clean("a\xFF"
                       "b",
                       255),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_clean("\xC0\xAF", 255), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(utf8_clean("\xED\xA0\x80", 255), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_clean("\xE2\x82", 255), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // cut short
}

TEST(Utf8Clean, CutsOnACharacterBoundary) {
  // 254 ASCII bytes and a 2-byte character: 256 bytes; the character does not fit in 255.
  std::string s(254, 'x');
  s += "\xC3\xA9";
  EXPECT_EQ(utf8_clean(s, 255), std::string(254, 'x'));
  EXPECT_EQ(utf8_clean(s, 256), s);
  EXPECT_EQ(utf8_clean("\xF0\x9F\x98\x80", 3), "");
}

}  // namespace
}  // namespace relay
