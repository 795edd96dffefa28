#include "storage/storage.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "storage/file_storage.hpp"

namespace relay::storage {

namespace {

using CreateFn = Storage* (*)(const Config*, const char*, const char*, char*, size_t);

// relay-s3.so is looked for in $RELAY_MODULE_DIR, then beside the executable, then in the
// install directory. It is never unloaded.
CreateFn load_s3_module() {
  static std::once_flag once;
  static CreateFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> dirs;
    if (const char* d = std::getenv("RELAY_MODULE_DIR")) dirs.emplace_back(d);
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) dirs.push_back(exe.parent_path().string());
    dirs.emplace_back(RELAY_MODULE_INSTALL_DIR);
    for (const auto& dir : dirs) {
      std::string path = dir + "/relay-s3.so";
      if (::access(path.c_str(), R_OK) != 0) continue;
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        error = ::dlerror();
        continue;
      }
      fn = reinterpret_cast<CreateFn>(::dlsym(h, "relay_s3_storage_create"));
      if (fn) return;
      error = path + ": no relay_s3_storage_create";
    }
    if (error.empty()) error = "relay-s3.so not found (set RELAY_MODULE_DIR)";
  });
  if (!fn) throw std::invalid_argument("storage.url: S3 support cannot be loaded: " + error);
  return fn;
}

}  // namespace

std::unique_ptr<Storage> make_storage(const Config& config) {
  const std::string& url = config.url;
  if (url.starts_with("file://")) {
    std::string root = url.substr(7);
    if (root.empty() || root.front() != '/')
      throw std::invalid_argument("storage.url: expected file:///absolute/path");
    return std::make_unique<FileStorage>(root, config.fsync);
  }
  if (url.starts_with("s3://")) {
    std::string rest = url.substr(5);
    auto slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (bucket.empty()) throw std::invalid_argument("storage.url: expected s3://bucket[/prefix]");
    char error[512] = {};
    Storage* s = load_s3_module()(&config, bucket.c_str(), prefix.c_str(), error, sizeof error);
    if (!s) throw std::invalid_argument(std::string("storage: ") + error);
    return std::unique_ptr<Storage>(s);
  }
  throw std::invalid_argument("storage.url: expected file:///path or s3://bucket[/prefix]");
}

}  // namespace relay::storage
