#pragma once
// Inputs by reference: a job may name its input by URL instead of uploading it, and the relay
// streams it to the model from there like a stored input — in bounded memory, nothing copied
// through the gateway. Two kinds (README, "Inputs by reference"):
//   s3://bucket/key   read with the relay's S3 endpoint, region and credentials;
//   https://...       fetched under the SSRF rules of callbacks: a host that resolves to a
//                     private address is refused (unless allow_private), the address checked
//                     is the one connected to, and each redirect (at most five, https only) is
//                     checked again.
// Failures are StorageErrors: `invalid` for a refused URL, `too_large` over max_size, the
// others as for storage.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include "common/byte_stream.hpp"
#include "storage/storage.hpp"

namespace relay::storage {

struct InputUrlOptions {
  bool allow_private = false;
  std::string ca_file;         // extra trusted CAs for https (PEM); empty: the system's
  std::uint64_t max_size = 0;  // 0: no limit
  std::chrono::milliseconds timeout{30'000};  // connect and stall, not the whole transfer
};

// `storage` gives the S3 endpoint, region and addressing for s3:// URLs.
std::unique_ptr<ByteSource> open_input_url(const Config& storage, const InputUrlOptions& options,
                                           const std::string& url, std::stop_token stop);

// The https:// half, in relay-s3.so (libcurl); open_input_url loads it when first needed.
std::unique_ptr<ByteSource> open_https(const InputUrlOptions& options, const std::string& url,
                                       std::stop_token stop);

}  // namespace relay::storage
