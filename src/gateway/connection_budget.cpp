#include "gateway/connection_budget.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace relay::gateway {

ConnectionBudget connection_budget(const ConnectionLimits& l) {
  // Beside connections: per pool thread a Redis connection (one per master in cluster mode) and
  // a storage file or socket, plus the background loops and webhook deliveries.
  const long reserve = 64 + 8 * l.pool_threads;
  const long fit = std::max(1L, l.open_files - reserve);
  if (l.configured > 0) {
    if (l.configured <= fit) return {l.configured, l.open_files, "server.max_connections"};
    return {fit, l.open_files, "open files"};
  }
  const std::uint64_t by_memory =
      l.per_connection > 0 ? l.memory / l.per_connection : static_cast<std::uint64_t>(fit);
  if (by_memory < static_cast<std::uint64_t>(fit))
    return {std::max(1L, static_cast<long>(by_memory)), l.open_files, "memory"};
  return {fit, l.open_files, "open files"};
}

std::uint64_t connection_cost(std::uint64_t max_header_size) {
  return max_header_size + 16 * 1024;
}

long raise_open_file_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur != rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? (1L << 20)
                                      : static_cast<long>(std::min<rlim_t>(rl.rlim_cur, 1L << 30));
}

}  // namespace relay::gateway
