// Filesystem backend: the embedded default for one machine. Objects are files under a root;
// writes go to a temporary file that is renamed into place, so a reader never sees half an object.

#include "storage/file_storage.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "common/errors.hpp"

namespace relay::storage {
namespace {

namespace fs = std::filesystem;

// Keys are built by us, but a key must never escape the root whatever reaches this function.
void check_key(const std::string& key) {
  if (key.empty() || key.front() == '/' || key.find('\0') != std::string::npos)
    throw StorageError(ErrorKind::invalid, "invalid object key '" + key + "'");
  // No segment may lead elsewhere. (Split by hand: an fs::path costs an allocation a segment,
  // and every job's input and result pass here.)
  std::string_view rest = key;
  for (;;) {
    const auto slash = rest.find('/');
    const auto part = rest.substr(0, slash);
    if (part == ".." || part == ".")
      throw StorageError(ErrorKind::invalid, "invalid object key '" + key + "'");
    if (slash == std::string_view::npos) return;
    rest.remove_prefix(slash + 1);
  }
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  int e = errno;
  ErrorKind kind = e == ENOENT   ? ErrorKind::not_found
                   : e == EACCES ? ErrorKind::access_denied
                                 : ErrorKind::other;
  throw StorageError(kind, what + " " + path + ": " + std::strerror(e),
                     e == ENOENT ? "NoSuchKey" : "");
}

class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(FdGuard&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, std::string path, std::uint64_t size, std::stop_token stop)
      : fd_(fd), path_(std::move(path)), size_(size), stop_(std::move(stop)) {}
  size_t read(std::span<char> buf) override {
    if (stop_.stop_requested()) throw Aborted();
    // A stored object never changes (written whole, then renamed into place): once its size is
    // read, the end is known without the read(2) that would return 0 (one per job).
    if (done_ >= size_) return 0;
    const size_t want = static_cast<size_t>(std::min<std::uint64_t>(buf.size(), size_ - done_));
    for (;;) {
      ssize_t n = ::read(fd_.get(), buf.data(), want);
      if (n >= 0) {
        done_ += static_cast<std::uint64_t>(n);
        return static_cast<size_t>(n);
      }
      if (errno != EINTR) fail_errno("cannot read", path_);
    }
  }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  FdGuard fd_;
  std::string path_;
  std::uint64_t size_, done_ = 0;
  std::stop_token stop_;
};

// Folders known to exist (see FileWriter::known_dirs).
struct KnownDirs {
  std::array<std::string, 4> dirs;
  std::size_t next = 0;
  bool seen(const std::string& dir) const {
    return std::find(dirs.begin(), dirs.end(), dir) != dirs.end();
  }
  void add(std::string dir) {
    if (seen(dir)) return;
    dirs[next] = std::move(dir);
    next = (next + 1) % dirs.size();
  }
};

// Writes "<object>.tmp-<pid>-<n>" and renames it into place on commit.
class FileWriter final : public ObjectWriter {
 public:
  FileWriter(std::string path, std::string key, bool fsync, std::optional<std::uint64_t> size,
             std::stop_token stop)
      : path_(std::move(path)),
        dir_(path_.substr(0, path_.rfind('/'))),
        key_(std::move(key)),
        fsync_(fsync),
        size_(size),
        stop_(std::move(stop)) {
    // Unique without a syscall: this process's id and a counter.
    static std::atomic<std::uint64_t> counter{0};
    static const std::string pid = std::to_string(::getpid());
    tmp_ = path_ + ".tmp-" + pid + "-" + std::to_string(counter.fetch_add(1));
    // The folder is made first unless this thread has just seen it (a relay writes its result
    // beside the input it read); if it has gone since, it is made after all.
    const bool known = known_dirs.seen(dir_);
    if (!known) make_dir();
    fd_ = FdGuard(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
    if (fd_.get() < 0 && errno == ENOENT && known) {
      make_dir();
      fd_ = FdGuard(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
    }
    if (fd_.get() < 0) {
      int e = errno;
      ::rmdir(dir_.c_str());
      errno = e;
      fail_errno("cannot create", tmp_);
    }
  }
  // The folders of the objects this thread last read or wrote, which therefore exist (unless
  // removed since). A few, not one: a relay taking ahead reads the next job's input before it
  // writes the last job's result, and one remembered folder made that write's mkdir (EEXIST)
  // a wasted syscall per job.
  inline static thread_local KnownDirs known_dirs;

  ~FileWriter() override {
    if (committed_) return;
    fd_ = FdGuard(-1);
    ::unlink(tmp_.c_str());
    ::rmdir(dir_.c_str());  // the job's folder, if this was its only object (else: ENOTEMPTY)
  }
  void write(std::span<const char> data) override {
    if (stop_.stop_requested()) throw Aborted();
    size_t off = 0;
    while (off < data.size()) {
      ssize_t w = ::write(fd_.get(), data.data() + off, data.size() - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_errno("cannot write", key_);
      }
      off += static_cast<size_t>(w);
    }
    written_ += data.size();
  }
  void commit() override {
    if (stop_.stop_requested()) throw Aborted();
    if (size_ && written_ != *size_)
      throw StorageError(ErrorKind::invalid, key_ + ": " + std::to_string(written_) +
                                                 " bytes of the declared " +
                                                 std::to_string(*size_));
    if (fsync_ && ::fsync(fd_.get()) != 0) fail_errno("cannot fsync", key_);
    if (::close(fd_.release()) != 0) fail_errno("cannot close", key_);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_errno("cannot rename into", key_);
    committed_ = true;
    known_dirs.add(dir_);
  }

 private:
  // One mkdir in the common case (the job's own folder); the full walk only when a parent is
  // missing. Submissions create a folder per job, so this is on the hot path.
  void make_dir() {
    if (::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST) {
      std::error_code ec;
      fs::create_directories(dir_, ec);
      if (ec) throw StorageError(ErrorKind::other, "cannot create " + dir_ + ": " + ec.message());
    }
  }

  std::string path_, dir_, key_, tmp_;
  bool fsync_;
  std::optional<std::uint64_t> size_;
  std::uint64_t written_ = 0;
  std::stop_token stop_;
  FdGuard fd_{-1};
  bool committed_ = false;
};

}  // namespace

FileStorage::FileStorage(std::string root, bool fsync) : root_(std::move(root)), fsync_(fsync) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  // Not a config error: a volume may still be mounting. Callers decide whether to wait.
  if (ec) throw StorageError(ErrorKind::unavailable, "storage root " + root_ + ": " + ec.message());
}

std::unique_ptr<ByteSource> FileStorage::open(const std::string& key, std::stop_token stop) {
  return open_range(key, 0, UINT64_MAX, std::move(stop));
}

std::unique_ptr<ByteSource> FileStorage::open_range(const std::string& key, std::uint64_t first,
                                                    std::uint64_t length, std::stop_token stop) {
  check_key(key);
  std::string path = root_ + "/" + key;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("cannot open", key);
  FdGuard guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_errno("cannot stat", key);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (first > size || (first > 0 && ::lseek(fd, static_cast<off_t>(first), SEEK_SET) < 0))
    throw StorageError(ErrorKind::invalid, "cannot read " + key + " from byte " +
                                               std::to_string(first) + ": past its end");
  FileWriter::known_dirs.add(path.substr(0, path.rfind('/')));
  return std::make_unique<FileSource>(guard.release(), key, std::min(length, size - first),
                                      std::move(stop));
}

std::uint64_t FileStorage::size_of(const std::string& key, std::stop_token) {
  check_key(key);
  struct stat st {};
  if (::stat((root_ + "/" + key).c_str(), &st) != 0) fail_errno("cannot stat", key);
  return static_cast<std::uint64_t>(st.st_size);
}

std::unique_ptr<ObjectWriter> FileStorage::create(const std::string& key, std::stop_token stop,
                                                  std::optional<std::uint64_t> size) {
  check_key(key);
  return std::make_unique<FileWriter>(root_ + "/" + key, key, fsync_, size, std::move(stop));
}

std::size_t FileStorage::sweep(std::chrono::seconds older_than) {
  const auto cutoff = fs::file_time_type::clock::now() - older_than;
  std::size_t removed = 0;
  std::error_code ec;
  std::vector<fs::path> folders;
  std::set<fs::path> emptied;
  for (fs::recursive_directory_iterator
           it(root_, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code e;
    if (it->is_directory(e)) {
      folders.push_back(p);
      continue;
    }
    // FileWriter's temporaries: "<object>.tmp-<pid>-<n>".
    if (p.filename().string().find(".tmp-") != std::string::npos &&
        fs::last_write_time(p, e) < cutoff && !e && fs::remove(p, e)) {
      ++removed;
      emptied.insert(p.parent_path());
    }
  }
  // Deepest first, so that a folder emptied by its children's removal goes too. (Removing an
  // entry makes its folder look new: what this sweep emptied goes whatever its time.)
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    std::error_code e;
    if (!fs::is_empty(*it, e) || e) continue;
    const bool old = emptied.contains(*it) || (fs::last_write_time(*it, e) < cutoff && !e);
    if (old && ::rmdir(it->c_str()) == 0) {
      ++removed;
      emptied.insert(it->parent_path());
    }
  }
  return removed;
}

void FileStorage::remove(const std::string& key) {
  check_key(key);
  std::string path = root_ + "/" + key;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_errno("cannot delete", key);
  // The job's folder goes with its last object (a refused submission's, or after GC).
  if (auto slash = path.rfind('/'); slash > root_.size()) ::rmdir(path.substr(0, slash).c_str());
}

void FileStorage::check() {
  if (::access(root_.c_str(), W_OK) != 0) fail_errno("storage root not writable:", root_);
}

}  // namespace relay::storage
