#include "relay/spool.hpp"

#include <stdexcept>

namespace relay::sidecar {
namespace {

class FileReader final : public ByteSource {
 public:
  FileReader(std::FILE* f, std::uint64_t size) : f_(f), size_(size) { std::rewind(f_); }
  size_t read(std::span<char> buf) override {
    size_t n = std::fread(buf.data(), 1, buf.size(), f_);
    if (n == 0 && std::ferror(f_))
      throw std::runtime_error("spool: cannot read the temporary file");
    return n;
  }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  std::FILE* f_;
  std::uint64_t size_;
};

}  // namespace

void Spool::write(const char* data, size_t n) {
  size_ += n;
  if (!file_ && memory_.size() + n <= kMemoryLimit) {
    memory_.append(data, n);
    return;
  }
  if (!file_) {
    file_.reset(std::tmpfile());
    if (!file_) throw std::runtime_error("spool: cannot create a temporary file");
    if (!memory_.empty() &&
        std::fwrite(memory_.data(), 1, memory_.size(), file_.get()) != memory_.size())
      throw std::runtime_error("spool: cannot write the temporary file");
    memory_.resize(std::min(memory_.size(), size_t{4096}));  // keep the head for error messages
    memory_.shrink_to_fit();
  }
  if (std::fwrite(data, 1, n, file_.get()) != n)
    throw std::runtime_error("spool: cannot write the temporary file");
}

std::string Spool::head(size_t max) const {
  return memory_.substr(0, std::min(max, memory_.size()));
}

std::unique_ptr<ByteSource> Spool::reader() const {
  if (file_) {
    std::fflush(file_.get());
    return std::make_unique<FileReader>(file_.get(), size_);
  }
  return std::make_unique<MemorySource>(memory_);
}

}  // namespace relay::sidecar
