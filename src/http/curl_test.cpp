#include "http/curl.hpp"

#include <gtest/gtest.h>

namespace relay::http {
namespace {

TEST(HeaderLine, NamesAreLowercaseAndValuesTrimmed) {
  auto h = header_line("ETag: \"abc123\"\r\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->first, "etag");
  EXPECT_EQ(h->second, "\"abc123\"");
  h = header_line("retry-after:\t 120 \r\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->first, "retry-after");
  EXPECT_EQ(h->second, "120");
  h = header_line("X-Empty:\r\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->second, "");
  EXPECT_FALSE(header_line("HTTP/1.1 200 OK\r\n")) << "a status line is not a header";
  EXPECT_FALSE(header_line("\r\n"));
  EXPECT_FALSE(header_line(": no name\r\n"));
}

TEST(HeaderLine, CollectedAsCurlHandsThemOver) {
  HeaderMap m;
  for (std::string line :
       {"HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 503 Busy\r\n", "Retry-After: 5\r\n",
        "RETRY-AFTER: 7\r\n", "Content-Length: 0\r\n", "\r\n"})
    EXPECT_EQ(collect_headers(line.data(), 1, line.size(), &m), line.size());
  EXPECT_EQ(m["retry-after"], "7") << "the last of a repeated header";
  EXPECT_EQ(m["content-length"], "0");
}

}  // namespace
}  // namespace relay::http
