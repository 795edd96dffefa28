// Test fault, preloaded into a process under test (LD_PRELOAD): a name server that does not
// answer. getaddrinfo for a host name ending in ".slow.test" waits RELAY_TEST_SLOW_DNS_MS
// (default 10000) and then fails with EAI_AGAIN, as the system resolver does after its retries;
// with RELAY_TEST_SLOW_DNS_MS=0 it answers 127.0.0.1 at once instead (the name server working,
// for a process that must accept the name first). Each such lookup first appends its name and a
// newline to RELAY_TEST_SLOW_DNS_LOG, when set, so that a test can wait for the lookups to have
// started. Every other name goes to the real getaddrinfo.
#include <dlfcn.h>
#include <netdb.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {
using Getaddrinfo = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
Getaddrinfo real() {
  static const auto fn = reinterpret_cast<Getaddrinfo>(dlsym(RTLD_NEXT, "getaddrinfo"));
  return fn;
}
}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** res) {
  static constexpr char kSuffix[] = ".slow.test";
  const std::size_t n = node ? std::strlen(node) : 0, k = sizeof kSuffix - 1;
  if (n > k && std::strcmp(node + n - k, kSuffix) == 0) {
    if (const char* log = std::getenv("RELAY_TEST_SLOW_DNS_LOG"))
      if (std::FILE* f = std::fopen(log, "a")) {
        std::fprintf(f, "%s\n", node);
        std::fclose(f);
      }
    const char* ms_text = std::getenv("RELAY_TEST_SLOW_DNS_MS");
    const long ms = ms_text ? std::atol(ms_text) : 10000;
    if (ms == 0) return real()("127.0.0.1", service, hints, res);
    timespec t{ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    return EAI_AGAIN;
  }
  return real()(node, service, hints, res);
}
