#include "common/trace.hpp"

#include <gtest/gtest.h>

namespace relay {
namespace {

TEST(TraceContext, ValidTraceparentsAreRead) {
  auto t = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(t->flags, "01");
  EXPECT_EQ(t->header(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  // A later version with more fields is read as version 00.
  EXPECT_TRUE(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"));
}

TEST(TraceContext, InvalidOnesAreNot) {
  for (const char* bad :
       {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 has no more
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) {
    EXPECT_FALSE(parse_traceparent(bad)) << bad;
  }
}

TEST(TraceContext, HopsKeepTheTraceWithANewParent) {
  auto root = new_trace();
  EXPECT_TRUE(parse_traceparent(root.header())) << root.header();
  auto hop = child_of(root);
  EXPECT_EQ(hop.trace_id, root.trace_id);
  EXPECT_EQ(hop.flags, root.flags);
  EXPECT_NE(hop.parent_id, root.parent_id);
  EXPECT_NE(new_trace().trace_id, root.trace_id);
}

TEST(TraceContext, TracestateWithinBoundsOnly) {
  EXPECT_EQ(clean_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  EXPECT_EQ(clean_tracestate(std::string(513, 'a')), "");
  EXPECT_EQ(clean_tracestate("a=b\n"), "");
}

}  // namespace
}  // namespace relay
