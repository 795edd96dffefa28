#include "redis/connection.hpp"

#include <gtest/gtest.h>

namespace relay::redis {
namespace {

TEST(RedisErrors, TransientStatesAreRetryableOthersAreNot) {
  struct Case {
    const char* reply;
    bool transient;
  };
  const Case cases[] = {
      {"LOADING Redis is loading the dataset in memory", true},
      {"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
       true},
      {"TRYAGAIN Multiple keys request during rehashing of slot", true},
      {"CLUSTERDOWN The cluster is down", true},
      {"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
      {"READONLY You can't write against a read only replica.", true},
      {"UNBLOCKED force unblock from blocking operation, instance state changed", true},
      {"LOADING", true},
      // Out of memory: passes when memory is freed (retention, an operator); nothing was written.
      {"OOM command not allowed when used memory > 'maxmemory'.", true},
      {"OOM command not allowed when used memory > 'maxmemory'. script: 3a2d, on @user_script:26.",
       true},
      {"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
       "to disk.",
       true},
      {"NOREPLICAS Not enough good replicas to write.", true},
      {"ERR max number of clients reached", true},
      // Real errors: a bug or a misconfiguration, never retried.
      {"BUSYGROUP Consumer Group name already exists", false},
      {"BUSYKEY Target key name already exists.", false},
      {"ERR unknown command 'FOO'", false},
      {"NOSCRIPT No matching script. Please use EVAL.", false},
      {"WRONGPASS invalid username-password pair or user is disabled.", false},
      {"NOAUTH Authentication required.", false},
      {"MOVED 3999 127.0.0.1:6381", false},
      {"", false},
  };
  for (const auto& c : cases) EXPECT_EQ(is_transient_error(c.reply), c.transient) << c.reply;
}

TEST(RedisErrors, ADemotedMasterNeedsANewConnectionABusyOneDoesNot) {
  for (const char* r : {"READONLY You can't write against a read only replica.",
                        "MASTERDOWN Link with MASTER is down", "UNBLOCKED force unblock",
                        "ERR max number of clients reached"})
    EXPECT_TRUE(needs_new_connection(r)) << r;
  for (const char* r : {"LOADING Redis is loading", "BUSY Redis is busy", "TRYAGAIN slot"})
    EXPECT_FALSE(needs_new_connection(r)) << r;
}

TEST(ClusterRouting, CommandsAreRoutedByTheirFirstKey) {
  using V = std::vector<std::string>;
  EXPECT_EQ(routing_key(V{"LLEN", "relay:{m}:pending"}), "relay:{m}:pending");
  EXPECT_EQ(routing_key(V{"EVALSHA", "abc", "2", "k1", "k2", "a"}), "k1");
  EXPECT_EQ(routing_key(V{"EVAL", "return 1", "0"}), std::nullopt);
  EXPECT_EQ(routing_key(V{"XREADGROUP", "GROUP", "g", "c", "COUNT", "100", "BLOCK", "1000",
                          "STREAMS", "s1", ">"}),
            "s1");
  EXPECT_EQ(routing_key(V{"XGROUP", "CREATE", "s1", "g", "0", "MKSTREAM"}), "s1");
  EXPECT_EQ(routing_key(V{"BLMOVE", "a", "b", "LEFT", "RIGHT", "1.0"}), "a");
  // Keyless: the previous command's node (WAIT must be) or any master.
  for (const char* c : {"WAIT", "PUBLISH", "SUBSCRIBE", "PSUBSCRIBE", "CLIENT", "PING", "SCAN"})
    EXPECT_EQ(routing_key(V{c, "x", "y"}), std::nullopt) << c;
  EXPECT_EQ(routing_key(V{"ping"}), std::nullopt);
}

TEST(ClusterRouting, SeedListsParseLikeSentinelLists) {
  auto ep = parse_cluster_urls("rediss://u:p@10.0.0.1:7000, 10.0.0.2 ,10.0.0.3:7002");
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.username, "u");
  EXPECT_EQ(ep.password, "p");
  ASSERT_EQ(ep.cluster_seeds.size(), 3u);
  EXPECT_EQ(ep.cluster_seeds[0], (std::pair<std::string, int>{"10.0.0.1", 7000}));
  EXPECT_EQ(ep.cluster_seeds[1], (std::pair<std::string, int>{"10.0.0.2", 6379}));
  EXPECT_THROW(parse_cluster_urls("redis://a:1/2"), std::invalid_argument);  // db 0 only
  EXPECT_THROW(parse_cluster_urls("redis://a:1,,b:2"), std::invalid_argument);
}

}  // namespace
}  // namespace relay::redis
