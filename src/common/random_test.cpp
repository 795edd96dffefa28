#include "common/random.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

namespace relay {
namespace {

TEST(Random, BufferedBytesNeverRepeat) {
  std::set<std::string> seen;
  // Across many refills of the buffer, small and odd sizes, and large requests that bypass it.
  for (int i = 0; i < 5000; ++i) {
    EXPECT_TRUE(seen.insert(random_hex(8 + i % 9)).second);
    if (i % 100 == 0) {
      EXPECT_TRUE(seen.insert(random_hex(100)).second);
    }
  }
}

TEST(Random, ThreadsDrawDifferentBytes) {
  std::vector<std::string> drawn(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < drawn.size(); ++t)
    threads.emplace_back([&, t] { drawn[t] = random_hex(16); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::set<std::string>(drawn.begin(), drawn.end()).size(), drawn.size());
}

TEST(Random, AForkedChildDoesNotServeItsParentsBufferedBytes) {
  random_hex(8);  // the buffer is filled: what is left in it would come next
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string child = random_hex(16);
    (void)!::write(fds[1], child.data(), child.size());
    ::_exit(0);
  }
  std::string parent = random_hex(16);
  std::string child(32, '\0');
  ASSERT_EQ(::read(fds[0], child.data(), child.size()), 32);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_NE(parent, child);
}

}  // namespace
}  // namespace relay
