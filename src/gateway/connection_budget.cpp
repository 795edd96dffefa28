#include "gateway/connection_budget.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

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

std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "max") return std::nullopt;
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || p != text.data() + text.size()) return std::nullopt;
  // cgroup v1 says "no limit" with the largest page-aligned 64-bit value (~8 EiB).
  if (n >= (std::uint64_t{1} << 62)) return std::nullopt;
  return n;
}

namespace {

std::optional<std::uint64_t> read_limit(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream text;
  text << f.rdbuf();
  return parse_cgroup_memory_limit(text.str());
}

// This process's cgroup path in a hierarchy, from /proc/self/cgroup: "0::/a/b" for v2
// (controllers ""), "4:memory:/a/b" for v1's memory controller.
std::string cgroup_path(std::string_view controllers) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    if (std::string_view(line).substr(first + 1, second - first - 1) == controllers)
      return line.substr(second + 1);
  }
  return "";
}

// The lowest limit of `file` in the cgroup at `path` under `root` and its ancestors (a pod's
// limit may sit a level above its container's).
std::optional<std::uint64_t> lowest_limit(const std::string& root, std::string path,
                                          const std::string& file) {
  std::optional<std::uint64_t> lowest;
  for (;;) {
    if (auto l = read_limit(root + (path == "/" ? "" : path) + "/" + file))
      if (!lowest || *l < *lowest) lowest = l;
    if (path.empty() || path == "/") break;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return lowest;
}

}  // namespace

std::uint64_t memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  std::uint64_t limit = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * page : 0;
  auto lower = [&limit](std::optional<std::uint64_t> l) {
    if (l && *l > 0 && (limit == 0 || *l < limit)) limit = *l;
  };
  // In a container the cgroup namespace shows its own cgroup as the root; on a host the path
  // says where (a systemd service's MemoryMax=). v2 (unified), also where it sits beside v1.
  const std::string v2 = cgroup_path("");
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
    lower(lowest_limit(root, v2.empty() ? "/" : v2, "memory.max"));
  const std::string v1 = cgroup_path("memory");
  lower(lowest_limit("/sys/fs/cgroup/memory", v1.empty() ? "/" : v1, "memory.limit_in_bytes"));
  return limit;
}

}  // namespace relay::gateway
