// A connection's handshake against a real redis-server: AUTH, SELECT and CLIENT ID, and the
// command sent with them (Connection::open's `first`), in one round trip.

#include <gtest/gtest.h>

#include "harness.hpp"

namespace relay::testing {
namespace {

// The reads Redis made so far (INFO's total_reads_processed): the round trips made to it, each
// count adding one for its own INFO.
long long reads(redis::Connection& c) {
  auto info = redis::as_string(c.command({"INFO", "stats"}).get());
  return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
}

TEST(RedisConnection, TheHandshakeAndAFirstCommandAreOneRoundTrip) {
  RedisServer redis(false, {"--requirepass", "s3cret"}, false, false);
  auto ep = redis.endpoint();
  ep.db = 3;
  auto admin = redis.connect();
  admin.command({"SELECT", "3"});
  admin.command({"RPUSH", "queue", "a", "b"});

  const auto before = reads(admin);
  auto c = redis::Connection::open(ep, {"LRANGE", "queue", "0", "-1"});
  EXPECT_EQ(redis::as_strings(c.read_reply().get()), (std::vector<std::string>{"a", "b"}))
      << "the first command ran after AUTH and in the database SELECTed";
  EXPECT_EQ(reads(admin) - before, 2) << "AUTH, SELECT, CLIENT ID and LRANGE in one read (and "
                                         "this count's own INFO)";
  EXPECT_GT(c.client_id(), 0);
  // The connection goes on as any other.
  EXPECT_EQ(redis::as_integer(c.command({"LLEN", "queue"}).get()), 2);
}

TEST(RedisConnection, AWrongPasswordIsRefusedAtConnectAndTheFirstCommandDoesNotRun) {
  RedisServer redis(false, {"--requirepass", "s3cret"}, false, false);
  auto ep = redis.endpoint();
  ep.password = "wrong";
  try {
    redis::Connection::open(ep, {"SET", "written", "1"});
    FAIL() << "a wrong password was accepted";
  } catch (const redis::ReplyError& e) {
    EXPECT_NE(std::string(e.what()).find("WRONGPASS"), std::string::npos) << e.what();
  }
  auto admin = redis.connect();
  EXPECT_EQ(redis::as_integer(admin.command({"EXISTS", "written"}).get()), 0);
}

}  // namespace
}  // namespace relay::testing
