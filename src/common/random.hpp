#pragma once
// Random bytes from the kernel (getrandom(2)): for ids, lease tokens, multipart boundaries and
// temporary names. Not OpenSSL's RAND_bytes: its first use loads openssl.cnf, a cost every
// one-shot relay would pay at start.
//
// Small requests are served from a per-thread buffer of kernel bytes, refilled 256 bytes at a
// time: a job needs several (its id, trace and span ids, a lease token, a boundary), and a
// syscall each was a measurable share of a job's cost. Served bytes are wiped from the buffer,
// and a forked child never serves what its parent had buffered (pthread_atfork).

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/hex.hpp"

namespace relay {

namespace detail {

inline void getrandom_all(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed");
    }
    got += static_cast<size_t>(r);
  }
}

inline std::atomic<std::uint64_t> fork_generation{0};

struct RandomPool {
  unsigned char bytes[256];
  size_t used = sizeof bytes;
  std::uint64_t generation = ~std::uint64_t{0};
};

}  // namespace detail

inline void random_bytes(unsigned char* out, size_t n) {
  [[maybe_unused]] static const int at_fork = pthread_atfork(
      nullptr, nullptr, [] { detail::fork_generation.fetch_add(1, std::memory_order_relaxed); });
  if (n > 64) return detail::getrandom_all(out, n);
  thread_local detail::RandomPool pool;
  const auto generation = detail::fork_generation.load(std::memory_order_relaxed);
  if (pool.generation != generation || pool.used + n > sizeof pool.bytes) {
    detail::getrandom_all(pool.bytes, sizeof pool.bytes);
    pool.used = 0;
    pool.generation = generation;
  }
  std::memcpy(out, pool.bytes + pool.used, n);
  std::memset(pool.bytes + pool.used, 0, n);
  pool.used += n;
}

// 2n lowercase hex characters from n random bytes.
inline std::string random_hex(size_t n) {
  std::string bytes(n, '\0');
  random_bytes(reinterpret_cast<unsigned char*>(bytes.data()), n);
  return to_hex(bytes);
}

// Uniform in [0, 1), for jitter.
inline double random_unit() {
  std::uint64_t v = 0;
  random_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v);
  return static_cast<double>(v >> 11) / static_cast<double>(std::uint64_t{1} << 53);
}

}  // namespace relay
