#include "crypto/streaming_aead.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/random.hpp"

namespace relay::crypto {
namespace {

struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter>;

const char* digest_name(HkdfHash h) {
  switch (h) {
    case HkdfHash::sha1:
      return "SHA1";
    case HkdfHash::sha256:
      return "SHA256";
    case HkdfHash::sha512:
      return "SHA512";
  }
  return "SHA256";
}

const EVP_CIPHER* gcm(size_t key_size) {
  if (key_size == 16) return EVP_aes_128_gcm();
  if (key_size == 32) return EVP_aes_256_gcm();
  throw std::invalid_argument("AES-GCM-HKDF streaming: key size must be 16 or 32 bytes");
}

// The one place OpenSSL's HKDF is called.
std::string hkdf(HkdfHash hash, const std::string& ikm, const std::string& salt,
                 const std::string& info, size_t len) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (!kdf) throw std::runtime_error("HKDF unavailable");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (!ctx) throw std::runtime_error("HKDF context");
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                                          const_cast<char*>(digest_name(hash)), 0),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_KEY, const_cast<char*>(ikm.data()), ikm.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()), salt.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
                         OSSL_PARAM_construct_end()};
  std::string out(len, '\0');
  int ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), len, params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) throw std::runtime_error("HKDF derivation failed");
  return out;
}

using Nonce = std::array<unsigned char, kNoncePrefixSize + 5>;

Nonce nonce(const std::string& prefix, std::uint32_t segment, bool last) {
  Nonce n;
  std::memcpy(n.data(), prefix.data(), kNoncePrefixSize);
  n[kNoncePrefixSize] = static_cast<unsigned char>(segment >> 24);
  n[kNoncePrefixSize + 1] = static_cast<unsigned char>(segment >> 16);
  n[kNoncePrefixSize + 2] = static_cast<unsigned char>(segment >> 8);
  n[kNoncePrefixSize + 3] = static_cast<unsigned char>(segment);
  n[kNoncePrefixSize + 4] = last ? 1 : 0;
  return n;
}

// Plaintext bytes in segment i.
size_t plaintext_segment(size_t i, const StreamingParams& p) {
  return p.segment_size - kTagSize - (i == 0 ? header_size(p) : 0);
}

std::atomic<std::uint64_t> buffers_allocated{0};  // (segment_buffers_allocated())

// A segment's bytes in hand (ciphertext read ahead, plaintext sealed or verified): a buffer that
// is not zeroed when it grows, and whose memory is kept for the next object rather than freed.
// A segment is 1 MiB by default, and the relay's allocator hands blocks that large back to the
// kernel when they are freed (main.cpp): two fresh ones per encrypted object were faulted in
// and zeroed again for every job — most of a relay's CPU for an encrypted 1 MiB input (issue 14,
// the benchmark with encryption on). Up to kShelfBytes of them wait on a process-wide shelf; one
// that held plaintext is wiped first (freed, its bytes would have stayed until reused as well).
class Buffer {
 public:
  enum Holds { ciphertext, plaintext };
  explicit Buffer(Holds holds) : wipe_(holds == plaintext) { reuse(); }
  ~Buffer() { shelve(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() { return data_.get() + begin_; }
  const char* data() const { return data_.get() + begin_; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  std::string_view view() const { return {data(), size()}; }
  operator std::span<const char>() const { return {data(), size()}; }

  // n bytes in all: those held kept, any added unspecified until written.
  void resize(size_t n) {
    if (begin_ + n > capacity_) {
      if (n <= capacity_)
        compact();
      else
        grow(n);
    }
    end_ = begin_ + n;
    touched_ = std::max(touched_, end_);
  }
  void append(std::string_view bytes) {
    if (bytes.empty()) return;  // (memcpy to an empty buffer's null data is not allowed, even 0)
    const size_t old = size();
    resize(old + bytes.size());
    std::memcpy(data() + old, bytes.data(), bytes.size());
  }
  // Drops the first n bytes (what a segment used; a byte read ahead, or none, stays).
  void consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  void clear() { begin_ = end_ = 0; }

 private:
  static constexpr size_t kShelfBytes = 16 << 20;
  static constexpr size_t kWorthShelving = 64 << 10;  // smaller ones cost little to allocate
  struct Shelf {
    std::mutex mu;
    std::vector<std::pair<std::unique_ptr<char[]>, size_t>> spare;  // (memory, capacity)
    size_t bytes = 0;
  };
  static Shelf& shelf() {
    static Shelf* s = new Shelf;  // (never destroyed: a buffer may outlive static destruction)
    return *s;
  }

  // The bytes held moved to the front, when what is wanted fits the memory there is: a reader
  // that keeps a byte read ahead (which segment is the last) consumes all but it of each
  // segment, and the next segment's bytes then start near the buffer's end. A fresh buffer for
  // each of them — faulted in, and the old one wiped — took encrypting 1 GiB from 86% of
  // OpenSSL's speed to 72%.
  void compact() {
    if (size()) std::memmove(data_.get(), data(), size());
    end_ -= begin_;
    begin_ = 0;
  }
  void grow(size_t n) {
    // Doubling when appended to bit by bit; exactly n when sized to a segment at once.
    const size_t cap = std::max(n, std::min(2 * capacity_, n + (n >> 1)));
    auto fresh = std::make_unique_for_overwrite<char[]>(cap);
    buffers_allocated.fetch_add(1, std::memory_order_relaxed);
    if (size()) std::memcpy(fresh.get(), data(), size());
    end_ -= begin_;
    begin_ = 0;
    if (wipe_) OPENSSL_cleanse(data_.get(), touched_);
    data_ = std::move(fresh);
    capacity_ = cap;
    touched_ = end_;
  }
  void reuse() {
    Shelf& s = shelf();
    std::lock_guard lock(s.mu);
    if (s.spare.empty()) return;
    std::tie(data_, capacity_) = std::move(s.spare.back());
    s.spare.pop_back();
    s.bytes -= capacity_;
  }
  void shelve() {
    if (wipe_ && data_) OPENSSL_cleanse(data_.get(), touched_);
    if (capacity_ < kWorthShelving) return;
    Shelf& s = shelf();
    std::lock_guard lock(s.mu);
    if (s.bytes + capacity_ > kShelfBytes) return;  // (freed)
    s.bytes += capacity_;
    s.spare.emplace_back(std::move(data_), capacity_);
  }

  const bool wipe_;
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0, begin_ = 0, end_ = 0;
  size_t touched_ = 0;  // bytes written to since the buffer was taken: what a wipe clears
};

// Reads until buf holds `want` bytes or the source ends. The buffer grows with what arrives
// (doubling, from 16 KiB), not to `want` at once: `want` is a whole segment, 1 MiB by default,
// and sizing the buffer to it zeroed — and, fresh from the allocator, faulted in — a segment's
// memory for every object however small: ~450 CPU-µs of a relay's 1 KiB job, and ~40 of the
// gateway's submission (issue 14, the benchmark with encryption on).
constexpr size_t kFirstFill = 16 << 10;

void fill(ByteSource& src, Buffer& buf, size_t want) {
  while (buf.size() < want) {
    size_t old = buf.size();
    size_t room = std::min(want, std::max(2 * old, kFirstFill));
    buf.resize(room);
    size_t n = src.read(std::span<char>(buf.data() + old, room - old));
    buf.resize(old + n);
    if (n == 0) return;
  }
}

void check_params(const StreamingParams& p) {
  (void)gcm(p.key_size);
  if (p.segment_size < header_size(p) + kTagSize + 1 || p.segment_size > (1u << 30))
    throw std::invalid_argument("AES-GCM-HKDF streaming: segment size out of range");
}

}  // namespace

std::uint64_t segment_buffers_allocated() {
  return buffers_allocated.load(std::memory_order_relaxed);
}

size_t header_size(const StreamingParams& p) {
  return 1 + p.key_size + kNoncePrefixSize;
}

std::uint64_t ciphertext_size(std::uint64_t n, const StreamingParams& p) {
  std::uint64_t first = plaintext_segment(0, p), rest = plaintext_segment(1, p);
  std::uint64_t segments = n <= first ? 1 : 1 + (n - first + rest - 1) / rest;
  return header_size(p) + n + segments * kTagSize;
}

std::optional<std::uint64_t> plaintext_size(std::uint64_t c, const StreamingParams& p) {
  const std::uint64_t seg = p.segment_size;
  if (c < header_size(p) + kTagSize) return std::nullopt;
  // Every segment but the last is whole; the first holds the header.
  const std::uint64_t segments = c <= seg ? 1 : 1 + (c - seg + seg - 1) / seg;
  const std::uint64_t n = c - header_size(p) - segments * kTagSize;
  if (ciphertext_size(n, p) != c) return std::nullopt;  // a last segment shorter than its tag
  return n;
}

RangeReading range_reading(std::uint64_t first, std::uint64_t length, std::uint64_t object_size,
                           const StreamingParams& p) {
  const std::uint64_t in_first = plaintext_segment(0, p), in_rest = plaintext_segment(1, p);
  // The segment holding plaintext byte `at`, and where it starts in plaintext and ciphertext.
  auto holding = [&](std::uint64_t at) {
    struct {
      std::uint64_t segment, plaintext, ciphertext;
    } s{0, 0, header_size(p)};
    if (at >= in_first) {
      s.segment = 1 + (at - in_first) / in_rest;
      s.plaintext = in_first + (s.segment - 1) * in_rest;
      s.ciphertext = s.segment * p.segment_size;
    }
    return s;
  };
  const auto start = holding(first);
  const auto end = holding(first + (length == 0 ? 0 : length - 1));
  const std::uint64_t stop =
      std::min<std::uint64_t>((end.segment + 1) * p.segment_size, object_size);
  RangeReading r;
  r.ciphertext_first = start.ciphertext;
  r.ciphertext_length = stop > start.ciphertext ? stop - start.ciphertext : 0;
  r.segment = static_cast<std::uint32_t>(start.segment);
  r.skip = first - start.plaintext;
  return r;
}

namespace {

// The encrypting half of the format, shared by the pull and the push encryptor: the header, the
// derived key, and sealing one segment after another.
class Sealer {
 public:
  Sealer(const std::string& key, const std::string& aad, StreamingParams p,
         const std::optional<std::string>& salt, const std::optional<std::string>& nonce_prefix)
      : p_(p) {
    check_params(p);
    if (key.size() != p.key_size) throw std::invalid_argument("encryption key has the wrong size");
    std::string s = salt.value_or(std::string(p.key_size, '\0'));
    prefix_ = nonce_prefix.value_or(std::string(kNoncePrefixSize, '\0'));
    if (!salt) random_bytes(reinterpret_cast<unsigned char*>(s.data()), s.size());
    if (!nonce_prefix)
      random_bytes(reinterpret_cast<unsigned char*>(prefix_.data()), prefix_.size());
    key_ = hkdf(p.hash, key, s, aad, p.key_size);
    header_ = std::string(1, static_cast<char>(header_size(p))) + s + prefix_;
    if (EVP_EncryptInit_ex(ctx_.get(), gcm(p.key_size), nullptr, nullptr, nullptr) != 1)
      throw std::runtime_error("AES-GCM init failed");
  }
  const std::string& header() const { return header_; }
  const StreamingParams& params() const { return p_; }
  // Plaintext bytes the next segment holds when it is not the last.
  size_t segment_plaintext() const { return plaintext_segment(segment_, p_); }
  bool done() const { return done_; }
  // Seals the next segment (plain.size() <= segment_plaintext()) into out (replaced).
  void seal(std::string_view plain, bool last, Buffer& out) {
    const Nonce iv = nonce(prefix_, segment_, last);
    out.clear();
    out.resize(plain.size() + kTagSize);
    int len = 0;
    if (EVP_EncryptInit_ex(ctx_.get(), nullptr, nullptr,
                           reinterpret_cast<const unsigned char*>(key_.data()), iv.data()) != 1 ||
        EVP_EncryptUpdate(ctx_.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                          reinterpret_cast<const unsigned char*>(plain.data()),
                          static_cast<int>(plain.size())) != 1 ||
        EVP_EncryptFinal_ex(ctx_.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) !=
            1 ||
        EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, kTagSize,
                            out.data() + plain.size()) != 1)
      throw std::runtime_error("AES-GCM encryption failed");
    ++segment_;
    done_ = last;
  }

 private:
  StreamingParams p_;
  std::string header_, prefix_, key_;
  CipherCtx ctx_{EVP_CIPHER_CTX_new()};
  std::uint32_t segment_ = 0;
  bool done_ = false;
};

}  // namespace

struct EncryptingSource::Impl {
  ByteSource& in;
  Sealer sealer;
  Buffer pending{Buffer::plaintext};  // read ahead (one segment + 1 byte: which is last)
  Buffer out{Buffer::ciphertext};     // not yet handed out
  size_t out_pos = 0;

  void next_segment() {
    size_t n = sealer.segment_plaintext();
    fill(in, pending, n + 1);
    bool last = pending.size() <= n;
    size_t take = std::min(n, pending.size());
    sealer.seal(pending.view().substr(0, take), last, out);
    pending.consume(take);
    out_pos = 0;
  }
};

EncryptingSource::EncryptingSource(ByteSource& plaintext, const std::string& key,
                                   const std::string& aad, StreamingParams params,
                                   std::optional<std::string> salt,
                                   std::optional<std::string> nonce_prefix)
    : impl_(new Impl{plaintext, Sealer(key, aad, params, salt, nonce_prefix)}) {
  impl_->out.append(impl_->sealer.header());
}

EncryptingSource::~EncryptingSource() = default;

size_t EncryptingSource::read(std::span<char> buf) {
  auto& m = *impl_;
  if (m.out_pos == m.out.size()) {
    if (m.sealer.done()) return 0;
    m.next_segment();
  }
  size_t n = std::min(buf.size(), m.out.size() - m.out_pos);
  std::memcpy(buf.data(), m.out.data() + m.out_pos, n);
  m.out_pos += n;
  return n;
}

std::optional<std::uint64_t> EncryptingSource::size() const {
  if (auto n = impl_->in.size()) return ciphertext_size(*n, impl_->sealer.params());
  return std::nullopt;
}

struct EncryptingWriter::Impl {
  ByteSink& out;
  Sealer sealer;
  Buffer pending{Buffer::plaintext};  // of the segment being filled
  Buffer sealed{Buffer::ciphertext};
  bool started = false;

  void start() {
    if (started) return;
    started = true;
    out.write(sealer.header());
  }
};

EncryptingWriter::EncryptingWriter(ByteSink& out, const std::string& key, const std::string& aad,
                                   StreamingParams params, std::optional<std::string> salt,
                                   std::optional<std::string> nonce_prefix)
    : impl_(new Impl{out, Sealer(key, aad, params, salt, nonce_prefix)}) {}

EncryptingWriter::~EncryptingWriter() = default;

void EncryptingWriter::write(std::span<const char> data) {
  auto& m = *impl_;
  if (m.sealer.done()) throw std::logic_error("EncryptingWriter: write after finish");
  m.start();
  std::string_view in(data.data(), data.size());
  while (!in.empty()) {
    // A segment is sealed once a byte beyond it arrived: only then is it known not to be last.
    const size_t n = m.sealer.segment_plaintext();
    if (m.pending.size() == n) {
      m.sealer.seal(m.pending.view(), false, m.sealed);
      m.out.write(m.sealed);
      m.pending.clear();
    }
    const size_t take = std::min(in.size(), n - m.pending.size());
    m.pending.append(in.substr(0, take));
    in.remove_prefix(take);
  }
}

void EncryptingWriter::finish() {
  auto& m = *impl_;
  if (m.sealer.done()) return;
  m.start();
  m.sealer.seal(m.pending.view(), true, m.sealed);
  m.out.write(m.sealed);
  m.pending.clear();
}

struct DecryptingSource::Impl {
  ByteSource& in;
  StreamingParams p;
  std::string master, aad, key = {}, prefix = {};
  CipherCtx ctx{EVP_CIPHER_CTX_new()};
  Buffer pending{Buffer::ciphertext};  // read ahead
  Buffer out{Buffer::plaintext};       // verified, not yet handed out
  size_t out_pos = 0;
  std::uint32_t segment = 0;
  bool started = false, done = false;
  // Resumed (a byte range): the object's size, and where the next segment starts in it.
  std::optional<std::uint64_t> object_size = {};
  std::uint64_t at = 0;

  void take_header(std::string_view header) {
    const size_t hs = header_size(p);
    if (header.size() < hs)
      throw DecryptionError("decryption failed: the ciphertext is shorter than its header");
    if (static_cast<unsigned char>(header[0]) != hs)
      throw DecryptionError("decryption failed: unexpected header length");
    std::string salt(header.substr(1, p.key_size));
    prefix = header.substr(1 + p.key_size, kNoncePrefixSize);
    key = hkdf(p.hash, master, salt, aad, p.key_size);
    started = true;
  }

  void read_header() {
    fill(in, pending, header_size(p));
    take_header(pending.view());
    pending.consume(std::min(pending.size(), header_size(p)));
  }

  void next_segment() {
    if (!started) read_header();
    size_t n = p.segment_size - (segment == 0 ? header_size(p) : 0);
    bool last;
    if (object_size) {
      // The segment's length is known from the object's size; the ciphertext given may end at
      // any segment's end (the range's).
      n = static_cast<size_t>(std::min<std::uint64_t>(n, *object_size - at));
      fill(in, pending, n);
      if (pending.empty()) {
        out.clear();
        out_pos = 0;
        done = true;
        return;
      }
      if (pending.size() < n)
        throw DecryptionError("decryption failed: truncated segment " + std::to_string(segment));
      last = at + n == *object_size;
      at += n;
    } else {
      fill(in, pending, n + 1);
      last = pending.size() <= n;
    }
    size_t take = std::min(n, pending.size());
    if (take < kTagSize)
      throw DecryptionError("decryption failed: truncated segment " + std::to_string(segment));
    const Nonce iv = nonce(prefix, segment, last);
    size_t pt = take - kTagSize;
    out.clear();
    out.resize(pt);
    int len = 0;
    std::array<char, kTagSize> tag;
    std::memcpy(tag.data(), pending.data() + pt, kTagSize);
    // The plaintext goes to `out` but is released only after EVP_DecryptFinal_ex verified the tag.
    bool ok =
        EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr,
                           reinterpret_cast<const unsigned char*>(key.data()), iv.data()) == 1 &&
        EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                          reinterpret_cast<const unsigned char*>(pending.data()),
                          static_cast<int>(pt)) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagSize, tag.data()) == 1 &&
        EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) ==
            1;
    if (!ok) {
      out.clear();
      throw DecryptionError(
          "decryption failed at segment " + std::to_string(segment) +
          " (wrong key or associated data, or the object was altered, truncated or reordered)");
    }
    pending.consume(take);
    out_pos = 0;
    ++segment;
    done = last;
  }
};

DecryptingSource::DecryptingSource(ByteSource& ciphertext, const std::string& key,
                                   const std::string& aad, StreamingParams params,
                                   std::optional<Resume> resume)
    : impl_(new Impl{ciphertext, params, key, aad}) {
  check_params(params);
  if (key.size() != params.key_size)
    throw std::invalid_argument("decryption key has the wrong size");
  if (EVP_DecryptInit_ex(impl_->ctx.get(), gcm(params.key_size), nullptr, nullptr, nullptr) != 1)
    throw std::runtime_error("AES-GCM init failed");
  if (resume) {
    impl_->take_header(resume->header);
    impl_->segment = resume->segment;
    impl_->object_size = resume->object_size;
    impl_->at = resume->segment == 0 ? header_size(params)
                                     : std::uint64_t{resume->segment} * params.segment_size;
    if (impl_->at > resume->object_size)
      throw DecryptionError("decryption failed: the segment is past the object's end");
  }
}

DecryptingSource::~DecryptingSource() = default;

size_t DecryptingSource::read(std::span<char> buf) {
  auto& m = *impl_;
  while (m.out_pos == m.out.size()) {
    if (m.done) return 0;
    m.next_segment();  // an empty last segment yields nothing and ends the stream
  }
  size_t n = std::min(buf.size(), m.out.size() - m.out_pos);
  std::memcpy(buf.data(), m.out.data() + m.out_pos, n);
  m.out_pos += n;
  return n;
}

std::optional<std::uint64_t> DecryptingSource::size() const {
  return std::nullopt;
}

}  // namespace relay::crypto
