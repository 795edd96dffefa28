#include "storage/storage.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "storage/file_storage.hpp"
#include "storage/input_url.hpp"
#include "storage/resuming_source.hpp"

namespace relay::storage {

namespace {

using CreateFn = Storage* (*)(const Config*, const char*, const char*, char*, size_t);
using HttpsOpenFn = ByteSource* (*)(const InputUrlOptions*, const char*, std::stop_token*);

// relay-s3.so (libcurl: S3, https inputs) is looked for in $RELAY_MODULE_DIR, then beside the
// executable, then in the install directory. It is never unloaded.
void* s3_module() {
  static std::once_flag once;
  static void* handle = nullptr;
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
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) return;
      error = ::dlerror();
    }
    if (error.empty()) error = "relay-s3.so not found (set RELAY_MODULE_DIR)";
  });
  if (!handle) throw std::invalid_argument("S3 and https support cannot be loaded: " + error);
  return handle;
}

template <typename Fn>
Fn module_function(const char* name) {
  auto fn = reinterpret_cast<Fn>(::dlsym(s3_module(), name));
  if (!fn) throw std::invalid_argument(std::string("relay-s3.so has no ") + name);
  return fn;
}

// Stops at max_size: counted as read, and refused at once when the size is declared.
class LimitedSource final : public ByteSource {
 public:
  LimitedSource(std::unique_ptr<ByteSource> inner, std::uint64_t max, std::string url)
      : inner_(std::move(inner)), max_(max), url_(std::move(url)) {
    if (auto n = inner_->size(); n && max_ && *n > max_) too_large();
  }
  size_t read(std::span<char> buf) override {
    size_t n = inner_->read(buf);
    read_ += n;
    if (max_ && read_ > max_) too_large();
    return n;
  }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  [[noreturn]] void too_large() const {
    throw StorageError(ErrorKind::too_large,
                       url_ + " is larger than the limit of " + std::to_string(max_) + " bytes");
  }
  std::unique_ptr<ByteSource> inner_;
  std::uint64_t max_, read_ = 0;
  std::string url_;
};

// A source that keeps the storage it reads from.
class OwningSource final : public ByteSource {
 public:
  OwningSource(std::unique_ptr<Storage> storage, std::unique_ptr<ByteSource> inner)
      : storage_(std::move(storage)), inner_(std::move(inner)) {}
  size_t read(std::span<char> buf) override { return inner_->read(buf); }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<ByteSource> inner_;
};

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
    Storage* s = module_function<CreateFn>("relay_s3_storage_create")(
        &config, bucket.c_str(), prefix.c_str(), error, sizeof error);
    if (!s) throw std::invalid_argument(std::string("storage: ") + error);
    return std::unique_ptr<Storage>(s);
  }
  throw std::invalid_argument("storage.url: expected file:///path or s3://bucket[/prefix]");
}

std::unique_ptr<ByteSource> open_input_url(const Config& storage, const InputUrlOptions& o,
                                           const std::string& url, std::stop_token stop) {
  std::unique_ptr<ByteSource> source;
  if (url.starts_with("s3://")) {
    const std::string rest = url.substr(5);
    const auto slash = rest.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size())
      throw StorageError(ErrorKind::invalid, "input_url: expected s3://bucket/key");
    Config c = storage;
    c.url = "s3://" + rest.substr(0, slash);
    std::unique_ptr<Storage> bucket;
    try {
      bucket = make_storage(c);
    } catch (const std::invalid_argument& e) {
      throw StorageError(ErrorKind::invalid, e.what());
    }
    // A dropped connection mid-way resumes from where it stopped, as for the job's own input.
    auto object = std::make_unique<ResumingSource>(*bucket, rest.substr(slash + 1), stop);
    source = std::make_unique<OwningSource>(std::move(bucket), std::move(object));
  } else if (url.starts_with("https://")) {
    HttpsOpenFn open = nullptr;
    try {
      open = module_function<HttpsOpenFn>("relay_https_open");
    } catch (const std::invalid_argument& e) {
      throw StorageError(ErrorKind::invalid, e.what());
    }
    source.reset(open(&o, url.c_str(), &stop));
  } else {
    throw StorageError(ErrorKind::invalid, "input_url: expected s3://bucket/key or https://...");
  }
  // Named without its query in messages: a presigned URL's query is a credential.
  return std::make_unique<LimitedSource>(std::move(source), o.max_size,
                                         url.substr(0, url.find('?')));
}

}  // namespace relay::storage
