#include "common/cgroup.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace relay {

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

namespace {

std::optional<std::uint64_t> read_limit(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream text;
  text << f.rdbuf();
  return parse_cgroup_memory_limit(text.str());
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

}  // namespace relay
