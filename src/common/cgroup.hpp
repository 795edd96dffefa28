#pragma once
// What this process's cgroups say: where it sits in a hierarchy, and the memory it may use (a
// container's limit). Read by the gateway to size its connection limit, and by the tests that
// run it under a limit of their own.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace relay {

// This process's path in a cgroup hierarchy, from /proc/self/cgroup: controllers "" for v2
// ("0::/a/b"), "memory" for v1's memory controller ("4:memory:/a/b"); "" when it has none.
std::string cgroup_path(std::string_view controllers);

// The memory this process may use: its cgroup's limit when it has one (v2 memory.max, v1
// memory.limit_in_bytes, the lowest up the hierarchy), else the machine's.
std::uint64_t memory_limit();
// A cgroup memory limit file's text: "max", or a byte count (v1 writes a huge number for none).
std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text);

}  // namespace relay
