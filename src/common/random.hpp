#pragma once
// Random bytes from the kernel (getrandom(2)): for ids, lease tokens, multipart boundaries and
// temporary names. Not OpenSSL's RAND_bytes: its first use loads openssl.cnf, a cost every
// one-shot relay would pay at start.

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/hex.hpp"

namespace relay {

inline void random_bytes(unsigned char* out, size_t n) {
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
