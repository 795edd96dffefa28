#include "multipart/writer.hpp"

#include <gtest/gtest.h>

#include "multipart/parser.hpp"

namespace relay::multipart {
namespace {

TEST(MultipartWriter, FilePartCarriesNameAndTypeWithQuotesEscaped) {
  EXPECT_EQ(file_head("B", "a\"b\r\n.txt", "text/plain"),
            "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a%22b%0D%0A.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n");
  // A backslash is escaped: "a\" would read as an escaped quote to a quoted-string parser.
  EXPECT_NE(file_head("B", "dir\\", "t").find("filename=\"dir\\\\\"\r\n"), std::string::npos);
  EXPECT_NE(file_head("B", "", "").find("filename=\"input\""), std::string::npos);
  EXPECT_NE(file_head("B", "", "").find("application/octet-stream"), std::string::npos);
}

TEST(MultipartWriter, FieldsAndTail) {
  EXPECT_EQ(field("B", "lang", "eng"),
            "\r\n--B\r\nContent-Disposition: form-data; name=\"lang\"\r\n\r\neng");
  EXPECT_EQ(tail("B"), "\r\n--B--\r\n");
  EXPECT_EQ(new_boundary().size(), 6u + 32u);
  EXPECT_NE(new_boundary(), new_boundary());
}

// What the relay writes, the gateway's parser reads back: names with quotes, backslashes and
// line breaks, binary content that holds near-misses of the delimiter.
TEST(MultipartWriter, WhatIsWrittenParsesBack) {
  const std::string b = new_boundary();
  const std::string content =
      "bytes\r\n--" + b.substr(0, 10) + std::string("\r\n\0tail", 7) + std::string(1, '\0');
  const std::string body = file_head(b, "dir\\a \"q\".bin", "application/x-test") + content +
                           field(b, "lang", "en") + field(b, "json", R"({"a":[1,2]})") + tail(b);
  struct Collect final : Handler {
    std::vector<PartInfo> parts;
    std::vector<std::string> data;
    void on_part(const PartInfo& p) override {
      parts.push_back(p);
      data.emplace_back();
    }
    void on_data(std::string_view d) override { data.back().append(d); }
  } got;
  Parser parser(b, got);
  parser.feed(body);
  parser.finish();
  ASSERT_EQ(got.parts.size(), 3u);
  EXPECT_EQ(got.parts[0].name, "file");
  EXPECT_EQ(got.parts[0].filename, "dir\\a %22q%22.bin");  // quotes travel as browsers send them
  EXPECT_EQ(got.parts[0].content_type, "application/x-test");
  EXPECT_EQ(got.data[0], content);
  EXPECT_EQ(got.parts[1].name, "lang");
  EXPECT_EQ(got.data[1], "en");
  EXPECT_EQ(got.data[2], R"({"a":[1,2]})");
}

}  // namespace
}  // namespace relay::multipart
