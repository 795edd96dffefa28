#include "multipart/parser.hpp"

#include <gtest/gtest.h>

#include <random>

namespace relay::multipart {
namespace {

struct Parsed final : Handler {
  std::vector<PartInfo> info;
  std::vector<std::string> content;
  void on_part(const PartInfo& i) override {
    info.push_back(i);
    content.emplace_back();
  }
  void on_data(std::string_view d) override {
    ASSERT_FALSE(content.empty()) << "content before any part";
    content.back().append(d);
  }
};

// Feeds the body in pieces of a given size (1 = byte by byte), or random sizes (0).
Parsed parse(const std::string& body, const std::string& boundary, size_t chunk) {
  Parsed out;
  Parser parser(boundary, out);
  std::mt19937 rng(42);
  for (size_t pos = 0; pos < body.size();) {
    size_t n = chunk ? chunk : std::uniform_int_distribution<size_t>(1, 97)(rng);
    n = std::min(n, body.size() - pos);
    parser.feed(std::string_view(body).substr(pos, n));
    pos += n;
  }
  parser.finish();
  return out;
}

const std::vector<size_t> kChunkings{1, 2, 3, 7, 64, 4096, 0};

TEST(MultipartBoundary, FromContentType) {
  EXPECT_EQ(boundary_of("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(boundary_of("Multipart/Form-Data;boundary=\"a b:c\""), "a b:c");
  EXPECT_EQ(boundary_of("multipart/form-data; charset=utf-8; boundary=----x"), "----x");
  EXPECT_EQ(boundary_of("multipart/mixed; boundary=abc"), std::nullopt);
  EXPECT_EQ(boundary_of("multipart/form-data"), std::nullopt);
  EXPECT_EQ(boundary_of("multipart/form-data; boundary="), std::nullopt);
  EXPECT_EQ(boundary_of("multipart/form-data; boundary=" + std::string(71, 'a')), std::nullopt);
  EXPECT_EQ(boundary_of("multipart/form-data; boundary=a\r\nb"), std::nullopt);
  EXPECT_EQ(boundary_of("application/octet-stream"), std::nullopt);
}

TEST(Multipart, FieldsAndAFileUnderEveryChunking) {
  // What curl -F sends, with a file whose content contains near-misses of the delimiter
  // (RFC 2046: the delimiter itself never occurs in content, but its prefixes and look-alikes may.)
  const std::string file =
      "line1\r\n--XY\r\n-\r\n\r\n--xyz lower case\n--XYZ no CR\r-XYZ\r\n--X\r\n";
  const std::string body =
      "--XYZ\r\n"
      "Content-Disposition: form-data; name=\"operation\"\r\n\r\n"
      "transcribe\r\n"
      "--XYZ\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
      "Content-Type: audio/wav\r\n\r\n" +
      file +
      "\r\n--XYZ\r\n"
      "content-disposition: form-data; name=\"params\"\r\n\r\n"
      "{\"language\":\"en\"}\r\n"
      "--XYZ--\r\n"
      "epilogue is ignored";
  for (size_t chunk : kChunkings) {
    auto p = parse(body, "XYZ", chunk);
    ASSERT_EQ(p.info.size(), 3u) << "chunk " << chunk;
    EXPECT_EQ(p.info[0].name, "operation");
    EXPECT_FALSE(p.info[0].has_filename);
    EXPECT_EQ(p.content[0], "transcribe");
    EXPECT_EQ(p.info[1].name, "file");
    EXPECT_EQ(p.info[1].filename, "a \"b\".wav");
    EXPECT_EQ(p.info[1].content_type, "audio/wav");
    EXPECT_EQ(p.content[1], file) << "chunk " << chunk;
    EXPECT_EQ(p.content[2], "{\"language\":\"en\"}");
  }
}

TEST(Multipart, EmptyPartsPreambleAndBinaryContent) {
  std::string binary;
  for (int i = 0; i < 3000; ++i) binary += static_cast<char>(i * 131 % 256);
  const std::string body =
      "preamble to skip\r\n--b\r\nContent-Disposition: form-data; name=\"empty\"\r\n\r\n"
      "\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\"\r\n\r\n" +
      binary + "\r\n--b--";
  for (size_t chunk : kChunkings) {
    auto p = parse(body, "b", chunk);
    ASSERT_EQ(p.info.size(), 2u) << chunk;
    EXPECT_EQ(p.content[0], "");
    EXPECT_TRUE(p.info[1].has_filename);
    EXPECT_EQ(p.info[1].filename, "");
    EXPECT_EQ(p.content[1], binary) << chunk;
  }
}

TEST(Multipart, NothingAfterTheClosingDelimiterIsParsed) {
  const std::string body =
      "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n--b--\r\n"
      "--b\r\nContent-Disposition: form-data; name=\"c\"\r\n\r\nw\r\n--b--\r\n";
  for (size_t chunk : kChunkings) {
    auto p = parse(body, "b", chunk);
    ASSERT_EQ(p.info.size(), 1u) << chunk;
    EXPECT_EQ(p.content[0], "v");
  }
}

// A large file part reaches the handler in the pieces it was fed in (less a held-back tail),
// not copied into a growing buffer: the parser's own memory stays bounded.
TEST(Multipart, ContentPassesThroughInPlace) {
  struct Sizes final : Handler {
    size_t largest = 0, total = 0;
    void on_part(const PartInfo&) override {}
    void on_data(std::string_view d) override {
      largest = std::max(largest, d.size());
      total += d.size();
    }
  } sizes;
  Parser parser("b", sizes);
  parser.feed("--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n");
  const std::string piece(1 << 20, 'z');
  for (int i = 0; i < 8; ++i) parser.feed(piece);
  parser.feed("\r\n--b--");
  parser.finish();
  EXPECT_EQ(sizes.total, 8u << 20);
  EXPECT_GE(sizes.largest, (1u << 20) - 16);
}

TEST(Multipart, MalformedBodiesAreErrors) {
  struct Case {
    const char* description;
    std::string body;
  } cases[] = {
      {"empty body", ""},
      {"no boundary at all", "just some bytes"},
      {"no closing delimiter", "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc"},
      {"ends in headers", "--b\r\nContent-Disposition: form-data; name=\"f\""},
      {"ends after boundary", "--b"},
      {"junk after boundary",
       "--b junk\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--b--"},
      {"no content-disposition", "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--"},
      {"no headers", "--b\r\n\r\nx\r\n--b--"},
      {"not form-data", "--b\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nx\r\n--b--"},
      {"no name", "--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--"},
      {"unterminated quote", "--b\r\nContent-Disposition: form-data; name=\"f\r\n\r\nx\r\n--b--"},
      {"header without colon", "--b\r\nContent-Disposition form-data\r\n\r\nx\r\n--b--"},
      {"huge headers", "--b\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\nx\r\n--b--"},
      {"huge preamble",
       std::string(100000, 'p') +
           "\r\n--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--b--"},
  };
  for (const auto& c : cases) {
    for (size_t chunk : {size_t{1}, size_t{4096}}) {
      EXPECT_THROW(parse(c.body, "b", chunk), Error) << c.description << " (chunk " << chunk << ")";
    }
  }
}

TEST(Multipart, TooManyParts) {
  std::string body;
  for (int i = 0; i < 100; ++i)
    body += "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n";
  body += "--b--";
  EXPECT_THROW(parse(body, "b", 4096), Error);
}

TEST(Multipart, RandomBodiesNeverCrash) {
  // A cheap fuzz: random bytes around real structure must parse or throw Error.
  std::mt19937 rng(7);
  const std::string pieces[] = {
      "--b", "\r\n", "Content-Disposition: form-data; name=\"f\"", "\r\n\r\n", "x", "--", "\"", ";",
      "=",   "--b--"};
  for (int i = 0; i < 3000; ++i) {
    std::string body;
    int n = std::uniform_int_distribution<int>(0, 20)(rng);
    for (int j = 0; j < n; ++j)
      body += pieces[std::uniform_int_distribution<size_t>(0, std::size(pieces) - 1)(rng)];
    try {
      parse(body, "b", std::uniform_int_distribution<size_t>(1, 8)(rng));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace relay::multipart
