#include "common/json_members.hpp"

#include <gtest/gtest.h>

namespace relay {
namespace {

using Members = std::vector<std::pair<std::string, std::string>>;

TEST(JsonMembers, ValuesAreExactlyAsWritten) {
  EXPECT_EQ(json_members_as_written(
                R"( { "t" : 0.1, "big":123456789012345678901234567890, "e": 1.50E+3,
                      "s": "a \"quoted\" \u00e9\\", "b": true, "n": null,
                      "o": {"x": [1, "}"], "y": 2.0}, "a": [ 1 , 2 ] } )"),
            (Members{{"t", "0.1"},
                     {"big", "123456789012345678901234567890"},
                     {"e", "1.50E+3"},
                     {"s", "a \"quoted\" \xc3\xa9\\"},
                     {"b", "true"},
                     {"n", "null"},
                     {"o", R"({"x": [1, "}"], "y": 2.0})"},
                     {"a", "[ 1 , 2 ]"}}));
  EXPECT_EQ(json_members_as_written("{}"), Members{});
  EXPECT_EQ(json_members_as_written(R"({"k\u0041":-0})"), (Members{{"kA", "-0"}}));
}

TEST(JsonMembers, NotAnObjectIsAnError) {
  EXPECT_THROW(json_members_as_written("[1]"), std::invalid_argument);
  EXPECT_THROW(json_members_as_written(R"({"a" 1})"), std::invalid_argument);
}

}  // namespace
}  // namespace relay
