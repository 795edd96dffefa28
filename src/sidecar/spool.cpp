#include "sidecar/spool.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace relay::sidecar {
namespace {

std::string resolve(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* env = std::getenv("TMPDIR");
  return env && *env ? env : "/tmp";
}

// An unnamed file in dir: O_TMPFILE where the file system has it, otherwise a named file that
// is unlinked at once. Either way nothing is left behind if the relay dies.
std::FILE* open_unnamed(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string path = dir + "/relay-spool-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(path.c_str());
  }
  if (fd < 0)
    throw std::runtime_error("spool: cannot create a file in " + dir + ": " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "w+b");
  if (!f) {
    ::close(fd);
    throw std::runtime_error("spool: fdopen failed");
  }
  return f;
}

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
    file_.reset(open_unnamed(resolve(dir_)));
    if (!memory_.empty() &&
        std::fwrite(memory_.data(), 1, memory_.size(), file_.get()) != memory_.size())
      throw std::runtime_error("spool: cannot write the temporary file");
    memory_.resize(std::min(memory_.size(), size_t{4096}));  // keep the head for error messages
    memory_.shrink_to_fit();
  }
  if (std::fwrite(data, 1, n, file_.get()) != n)
    throw std::runtime_error("spool: cannot write the temporary file");
}

void Spool::check_dir(const std::string& dir) {
  // A directory this process may create files in: what a file's creation would need, asked
  // without creating one. Creating (and freeing) an unnamed file took 0.15-0.2 ms of each start
  // on ext4 by strace (its inode search; ~0.05 ms off the one-shot median measured). A
  // read-only file system answers EROFS, a missing directory ENOENT, as the creation would.
  const std::string d = resolve(dir);
  struct stat st;
  if (::stat(d.c_str(), &st) != 0)
    throw std::runtime_error("spool: cannot use " + d + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error("spool: " + d + " is not a directory");
  if (::faccessat(AT_FDCWD, d.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    throw std::runtime_error("spool: cannot create a file in " + d + ": " + std::strerror(errno));
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
