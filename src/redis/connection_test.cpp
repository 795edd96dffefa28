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
      // Real errors: a bug or a misconfiguration, never retried.
      {"BUSYGROUP Consumer Group name already exists", false},
      {"BUSYKEY Target key name already exists.", false},
      {"ERR unknown command 'FOO'", false},
      {"NOSCRIPT No matching script. Please use EVAL.", false},
      {"WRONGPASS invalid username-password pair or user is disabled.", false},
      {"NOAUTH Authentication required.", false},
      {"OOM command not allowed when used memory > 'maxmemory'.", false},
      {"MOVED 3999 127.0.0.1:6381", false},
      {"", false},
  };
  for (const auto& c : cases) EXPECT_EQ(is_transient_error(c.reply), c.transient) << c.reply;
}

TEST(RedisErrors, ADemotedMasterNeedsANewConnectionABusyOneDoesNot) {
  for (const char* r : {"READONLY You can't write against a read only replica.",
                        "MASTERDOWN Link with MASTER is down", "UNBLOCKED force unblock"})
    EXPECT_TRUE(needs_new_connection(r)) << r;
  for (const char* r : {"LOADING Redis is loading", "BUSY Redis is busy", "TRYAGAIN slot"})
    EXPECT_FALSE(needs_new_connection(r)) << r;
}

}  // namespace
}  // namespace relay::redis
