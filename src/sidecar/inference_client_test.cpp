#include "sidecar/inference_client.hpp"

#include <gtest/gtest.h>

#include "sidecar/spool.hpp"

namespace relay::sidecar {
namespace {

TEST(InferenceClient, RejectsNonHttpUrls) {
  EXPECT_THROW(InferenceClient("https://x:1"), std::invalid_argument);
  EXPECT_THROW(InferenceClient("nonsense"), std::invalid_argument);
  EXPECT_NO_THROW(InferenceClient("http://127.0.0.1:9000"));
}

TEST(InferenceClient, NothingListeningProbesAsZero) {
  InferenceClient c("http://127.0.0.1:1");
  EXPECT_EQ(c.probe("/health", std::chrono::milliseconds(500), {}), 0);
}

TEST(Spool, SmallBodiesStayInMemoryLargeOnesSpillAndReadBackWhole) {
  for (size_t size : {size_t{0}, size_t{10}, Spool::kMemoryLimit, Spool::kMemoryLimit + 1,
                      3 * Spool::kMemoryLimit + 7}) {
    Spool s;
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 31);
    for (size_t off = 0; off < size; off += 1000)
      s.write(data.data() + off, std::min<size_t>(1000, size - off));
    EXPECT_EQ(s.size(), size);
    auto r = s.reader();
    std::string back, buf(4096, '\0');
    while (size_t n = r->read(buf)) back.append(buf.data(), n);
    EXPECT_EQ(back, data) << size;
    EXPECT_EQ(s.head(5), data.substr(0, 5));
  }
}

}  // namespace
}  // namespace relay::sidecar
