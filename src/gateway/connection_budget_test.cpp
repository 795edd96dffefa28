#include "gateway/connection_budget.hpp"

#include <gtest/gtest.h>

#include "common/cgroup.hpp"

namespace relay::gateway {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

TEST(ConnectionBudget, TheDefaultIsTheLowerOfOpenFilesAndMemory) {
  // A container: a million open files, 512 MiB for connections of 32 KiB each.
  auto b = connection_budget({.open_files = 1 << 20,
                              .pool_threads = 24,
                              .memory = kGiB / 2,
                              .per_connection = connection_cost(16384)});
  EXPECT_EQ(b.max_connections, 16384);
  EXPECT_EQ(b.bound, "memory");
  // A host with 20,000 open files and much memory: the files bound it, less the reserve.
  b = connection_budget({.open_files = 20000,
                         .pool_threads = 24,
                         .memory = 12 * kGiB,
                         .per_connection = connection_cost(16384)});
  EXPECT_EQ(b.max_connections, 20000 - 64 - 8 * 24);
  EXPECT_EQ(b.bound, "open files");
}

TEST(ConnectionBudget, AnExplicitLimitStandsUnlessTheFilesCannotHoldIt) {
  auto b = connection_budget({.configured = 50000,
                              .open_files = 1 << 20,
                              .pool_threads = 24,
                              .memory = kGiB / 2,
                              .per_connection = connection_cost(16384)});
  EXPECT_EQ(b.max_connections, 50000) << "the operator's figure over the memory estimate";
  EXPECT_EQ(b.bound, "server.max_connections");
  b = connection_budget({.configured = 50000, .open_files = 1024, .pool_threads = 24});
  EXPECT_EQ(b.max_connections, 1024 - 64 - 8 * 24);
  EXPECT_EQ(b.bound, "open files");
}

TEST(ConnectionBudget, NeverBelowOne) {
  EXPECT_EQ(connection_budget({.open_files = 10, .pool_threads = 24}).max_connections, 1);
  EXPECT_EQ(connection_budget({.open_files = 1000, .memory = 10, .per_connection = 32768})
                .max_connections,
            1);
}

TEST(ConnectionBudget, CgroupLimitFiles) {
  EXPECT_EQ(parse_cgroup_memory_limit("1073741824\n"), kGiB);
  EXPECT_EQ(parse_cgroup_memory_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("9223372036854771712\n"), std::nullopt) << "v1: none";
  EXPECT_EQ(parse_cgroup_memory_limit(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("12k"), std::nullopt);
  EXPECT_GT(memory_limit(), 0u) << "this machine's memory at least";
}

}  // namespace
}  // namespace relay::gateway
