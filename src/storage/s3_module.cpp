// The S3 backend as a loadable module (relay-s3.so). libcurl and its dependencies (GnuTLS, LDAP,
// SSH, Kerberos...) cost ~5 ms of dynamic-loader and initialiser time at every process start —
// more than a one-shot relay's whole job on filesystem storage — so only processes configured
// for S3 load it (storage.cpp, make_storage).

#include <cstdlib>
#include <cstring>

#include "storage/input_url.hpp"
#include "storage/s3_storage.hpp"

extern "C" {

// Returns a new backend, or nullptr with the reason in `error` (for a config error message).
__attribute__((visibility("default"))) relay::storage::Storage* relay_s3_storage_create(
    const relay::storage::Config* config, const char* bucket, const char* prefix, char* error,
    size_t error_len) {
  try {
    auto env = [](const std::string& name) -> std::optional<std::string> {
      const char* v = std::getenv(name.c_str());
      return v ? std::optional<std::string>(v) : std::nullopt;
    };
    auto creds =
        relay::storage::make_credentials_provider(env, config->s3_region, config->s3_timeout);
    return new relay::storage::S3Storage(*config, bucket, prefix, std::move(creds));
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), error_len - 1);
    error[error_len - 1] = '\0';
    return nullptr;
  }
}

// An https:// input (storage/input_url.hpp). Throws StorageError, or Aborted once stop is
// requested; the caller owns the result.
__attribute__((visibility("default"))) relay::ByteSource* relay_https_open(
    const relay::storage::InputUrlOptions* options, const char* url, std::stop_token* stop) {
  return relay::storage::open_https(*options, url, *stop).release();
}
}
