#pragma once
// S3 backend on libcurl: SigV4 by CURLOPT_AWS_SIGV4, streaming GET, and one writer (S3Writer) for
// every upload: one PUT from memory for an object within one part; beyond it, pushed as it
// arrives (create()), a streamed PUT when its size is known and a multipart upload with a part in
// flight while the next fills when not; a whole source in hand (put()), a multipart upload whose
// parts are sent one at a time, each tried again on its own.

#include <memory>

#include "storage/aws_credentials.hpp"
#include "storage/storage.hpp"

namespace relay::storage {

class S3Storage final : public Storage {
 public:
  // Every request is signed with what creds gives at that moment, so temporary credentials
  // refreshed mid-transfer (a multipart upload's later parts) are picked up.
  S3Storage(const Config& config, std::string bucket, std::string prefix,
            std::shared_ptr<CredentialsProvider> creds);
  std::unique_ptr<ByteSource> open(const std::string& key, std::stop_token stop) override;
  std::unique_ptr<ByteSource> open_range(const std::string& key, std::uint64_t first,
                                         std::uint64_t length, std::stop_token stop) override;
  std::uint64_t size_of(const std::string& key, std::stop_token stop) override;
  std::unique_ptr<ObjectWriter> create(const std::string& key, std::stop_token stop,
                                       std::optional<std::uint64_t> size) override;
  // A source in hand (the relay's result, read from its spool): larger than one part, it goes
  // in parts sent one after another, each tried again on its own (request()) — a blip costs
  // that part, where one streamed PUT is sent again from its start. One part of memory, as an
  // object within one part takes.
  void put(const std::string& key, ByteSource& body, std::stop_token stop) override;
  void remove(const std::string& key) override;
  // DeleteObjects, kDeleteBatch keys a request (S3's limit).
  void remove_many(const std::vector<std::string>& keys) override;
  static constexpr size_t kDeleteBatch = 1000;
  // HEAD of the bucket, answered within kCheckWait (or s3_timeout, if shorter) or unavailable.
  void check() override;
  static constexpr std::chrono::milliseconds kCheckWait{2'000};

  // Tries of a PUT (an object or a part from memory) when S3 is unavailable (see request()).
  static constexpr int kPutAttempts = 3;

  // Exposed for tests: the URL of an object (with an already encoded, sorted query).
  std::string object_url(const std::string& key, const std::string& query = {}) const;

 private:
  void configure(void* easy, const std::string& method, const std::string& url,
                 void* headers) const;
  // One request with an in-memory body; returns the answer's body (ETag into *etag if given).
  // Throws StorageError for a transfer failure or an HTTP error.
  std::string request(const std::string& method, const std::string& key, const std::string& query,
                      std::string_view payload, std::string* etag, std::stop_token stop) const;
  std::string request_once(const std::string& method, const std::string& key,
                           const std::string& query, std::string_view payload, std::string* etag,
                           std::stop_token stop) const;
  // One request to url with payload and the header lines already in headers (http::Headers);
  // `what` names it in errors.
  std::string send(const std::string& method, const std::string& url, const std::string& what,
                   std::string_view payload, void* headers, std::string* etag,
                   std::stop_token stop) const;
  friend class S3Writer;
  friend class StreamedPut;

  Config config_;
  std::string bucket_, prefix_;
  std::shared_ptr<CredentialsProvider> creds_;
  std::string base_;  // scheme://host[:port][/bucket] — everything before the object key
  std::string sigv4_;
};

// For tests: <Error><Code>X</Code><Message>Y</Message></Error> -> {X, Y}
std::pair<std::string, std::string> parse_s3_error(const std::string& xml);

}  // namespace relay::storage
