#pragma once
// Object storage behind one interface (SPEC §6): a filesystem backend for one machine and an
// S3 backend for everything else. Keys are relative ("<service_type>/<id>/input"); the backend
// adds its root or bucket prefix.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "common/byte_stream.hpp"

namespace relay::storage {

enum class ErrorKind { not_found, access_denied, unavailable, invalid, too_large, other };

class StorageError : public std::runtime_error {
 public:
  StorageError(ErrorKind kind, std::string message, std::string code = {}, long http_status = 0)
      : std::runtime_error(std::move(message)),
        kind_(kind),
        code_(std::move(code)),
        http_status_(http_status) {}
  ErrorKind kind() const { return kind_; }
  const std::string& code() const { return code_; }  // S3 error code ("NoSuchKey"), if any
  long http_status() const { return http_status_; }

 private:
  ErrorKind kind_;
  std::string code_;
  long http_status_;
};

struct Config {
  std::string url = "file:///var/lib/relay/storage";  // file:///path or s3://bucket[/prefix]
  std::string s3_endpoint;  // empty: AWS, https://s3.<region>.amazonaws.com
  std::string s3_region = "us-east-1";
  bool s3_path_style = false;
  std::int64_t s3_part_size = 8 * 1024 * 1024;   // multipart part size; also the single-PUT limit
  std::chrono::milliseconds s3_timeout{30'000};  // connect and low-speed timeout, not total time
  bool fsync = false;                            // filesystem: fsync each object before rename
};

// An object written by pushing bytes into it as they arrive (the gateway's uploads). Nothing is
// visible under the key before commit(); a writer destroyed without commit() leaves nothing
// behind (its temporary file is removed, its multipart upload aborted). write() and commit()
// block on storage and throw StorageError, or Aborted once stop is requested.
class ObjectWriter : public ByteSink {
 public:
  virtual void commit() = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // Opens an object for streaming. Throws StorageError (not_found for a missing key). Reads from
  // the returned source throw StorageError, or Aborted once stop is requested.
  virtual std::unique_ptr<ByteSource> open(const std::string& key, std::stop_token stop) = 0;
  // Bytes [first, first + length) of an object (a download resumed), within its size as
  // size_of() gives it. The source's size() is `length`; like open() otherwise.
  virtual std::unique_ptr<ByteSource> open_range(const std::string& key, std::uint64_t first,
                                                 std::uint64_t length, std::stop_token stop) = 0;
  // An object's size in bytes. Throws StorageError (not_found for a missing key).
  virtual std::uint64_t size_of(const std::string& key, std::stop_token stop) = 0;
  // Starts writing an object (see ObjectWriter). `size`, when known, is exactly what will be
  // written (S3 then streams one PUT instead of buffering parts).
  virtual std::unique_ptr<ObjectWriter> create(const std::string& key, std::stop_token stop,
                                               std::optional<std::uint64_t> size) = 0;
  // Stores the whole source under key; the object appears whole or not at all. S3 sends an
  // object larger than a part in parts, each tried again on its own (see S3Storage::put).
  // (Inline like the rest of this class: relay-s3.so, loaded at run time, needs its vtable.)
  virtual void put(const std::string& key, ByteSource& body, std::stop_token stop) {
    auto writer = create(key, stop, body.size());
    copy(body, *writer);
    writer->commit();
  }
  // Deleting a missing key is not an error.
  virtual void remove(const std::string& key) = 0;
  // Every key removed (GC's batches: S3 takes a thousand keys a request). Throws StorageError
  // when any could not be: those removed stay removed, and a retry of all removes the rest.
  virtual void remove_many(const std::vector<std::string>& keys) {
    for (const auto& key : keys) remove(key);
  }
  // Cheap reachability check for readiness probes.
  virtual void check() = 0;
  // Removes what a crashed writer left behind — temporary objects and empty job folders — not
  // touched for `older_than` (an upload in progress writes more often than that). Returns how
  // many it removed. Object stores need nothing here: an unfinished upload is no object (their
  // incomplete multipart uploads are for a lifecycle rule, see README).
  virtual std::size_t sweep(std::chrono::seconds /*older_than*/) { return 0; }

 protected:
  // All of body into writer (not committed).
  static void copy(ByteSource& body, ObjectWriter& writer) {
    size_t cap = 0;
    auto buf = transfer_buffer(body.size(), cap);
    while (size_t n = body.read(std::span<char>(buf.get(), cap)))
      writer.write(std::span<const char>(buf.get(), n));
  }
};

// Throws std::invalid_argument (message fit for a config error) for a bad URL or missing
// credentials.
std::unique_ptr<Storage> make_storage(const Config& config);

}  // namespace relay::storage
