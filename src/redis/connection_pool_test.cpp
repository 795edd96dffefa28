#include "redis/connection_pool.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace relay::redis {
namespace {

// Connections open lazily: none of these tests needs a server.
TEST(ConnectionPool, ALeaseGoesBackAndIsLentAgain) {
  ConnectionPool pool(Endpoint{});
  LazyConnection* first = nullptr;
  {
    auto a = pool.borrow();
    first = &*a;
    auto b = pool.borrow();
    EXPECT_NE(&*b, first) << "two at once are two connections";
  }
  EXPECT_EQ(pool.idle(), 2u);
  auto again = pool.borrow();
  EXPECT_EQ(&*again, first) << "the last given back is lent first (b went back before a)";
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(ConnectionPool, AConnectionLeftByAnExceptionIsDropped) {
  ConnectionPool pool(Endpoint{});
  try {
    auto a = pool.borrow();
    throw std::runtime_error("a step failed half-way");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(pool.idle(), 0u);
  // Borrowed and given back while another exception is being handled: still given back.
  try {
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
    auto b = pool.borrow();
  }
  EXPECT_EQ(pool.idle(), 1u);
}

}  // namespace
}  // namespace relay::redis
