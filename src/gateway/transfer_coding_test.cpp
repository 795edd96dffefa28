#include "gateway/transfer_coding.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

TEST(TransferCoding, NoneOrChunkedAloneIsTaken) {
  for (const char* v : {"", "chunked", "Chunked", "CHUNKED", "  chunked\t", " "})
    EXPECT_FALSE(refuse_transfer_coding(v)) << '"' << v << '"';
}

TEST(TransferCoding, AFinalCodingOtherThanChunkedIs400) {
  for (const char* v : {"gzip", "identity", "xchunked", "chunkedx", "chunked, identity",
                        "chunked,gzip", "chunked;q=1", "chunked,", ","}) {
    auto r = refuse_transfer_coding(v);
    ASSERT_TRUE(r) << v;
    EXPECT_EQ(r->status, 400u) << v;
    EXPECT_NE(r->message.find("does not end in chunked"), std::string::npos) << r->message;
  }
}

TEST(TransferCoding, OtherCodingsBeforeChunkedAre501) {
  for (const char* v :
       {"gzip, chunked", "identity,chunked", "deflate ,\tChunked", "chunked, chunked"}) {
    auto r = refuse_transfer_coding(v);
    ASSERT_TRUE(r) << v;
    EXPECT_EQ(r->status, 501u) << v;
  }
}

TEST(TransferCoding, TheMessageQuotesAtMost100BytesOfTheValue) {
  auto r = refuse_transfer_coding(std::string(5000, 'x'));
  ASSERT_TRUE(r);
  EXPECT_LT(r->message.size(), 200u);
}

}  // namespace
}  // namespace relay::gateway
