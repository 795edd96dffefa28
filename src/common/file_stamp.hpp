#pragma once
// What a file is now, to tell when it changed: which file (a Kubernetes Secret volume swaps a
// symlink to a new directory; stat follows it), its size and its time of change. For settings
// read from files that are renewed in place — TLS certificates, API keys — without a restart.

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace relay {

struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;  // -1: no such file (or no path)
  std::int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

inline FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size,
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

}  // namespace relay
