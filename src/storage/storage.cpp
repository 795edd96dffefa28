#include "storage/storage.hpp"

#include "storage/file_storage.hpp"
#include "storage/s3_storage.hpp"

namespace relay::storage {

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
    return std::make_unique<S3Storage>(config, bucket, prefix, S3Credentials::from_environment());
  }
  throw std::invalid_argument("storage.url: expected file:///path or s3://bucket[/prefix]");
}

}  // namespace relay::storage
