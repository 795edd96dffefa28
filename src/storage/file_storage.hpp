#pragma once
#include "storage/storage.hpp"

namespace relay::storage {

class FileStorage final : public Storage {
 public:
  FileStorage(std::string root, bool fsync);
  std::unique_ptr<ByteSource> open(const std::string& key, std::stop_token stop) override;
  std::unique_ptr<ByteSource> open_range(const std::string& key, std::uint64_t first,
                                         std::uint64_t length, std::stop_token stop) override;
  std::uint64_t size_of(const std::string& key, std::stop_token stop) override;
  std::unique_ptr<ObjectWriter> create(const std::string& key, std::stop_token stop,
                                       std::optional<std::uint64_t> size) override;
  void remove(const std::string& key) override;
  void check() override;
  std::size_t sweep(std::chrono::seconds older_than) override;

 private:
  std::string root_;
  bool fsync_;
};

}  // namespace relay::storage
