#pragma once
// Tink's AES-GCM-HKDF streaming AEAD (SPEC §7), as streams: EncryptingSource reads plaintext and
// yields ciphertext, EncryptingWriter is handed plaintext and writes ciphertext on (the gateway's
// uploads), DecryptingSource reads ciphertext and yields plaintext — each holding about two
// segments, whatever the object size. Any Tink user with the key reads what we write.
//
// Format: header = header length (1 byte) ‖ salt (key size bytes) ‖ nonce prefix (7 bytes);
// segment key = HKDF(hash, ikm = key, salt, info = associated data); segment i is
// AES-GCM(segment key, nonce = prefix ‖ uint32_be(i) ‖ last ? 1 : 0, aad = "") of the next
// plaintext chunk, ciphertext ‖ 16-byte tag. Ciphertext segments are segment_size bytes, the first
// shorter by the header, the last possibly shorter; an empty plaintext is one tag-only segment.
//
// The decryptor releases no byte of a segment before that segment's tag has verified, and a
// stream that ends without a verified last segment, or continues after it, is an error.

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/byte_stream.hpp"

namespace relay::crypto {

enum class HkdfHash { sha1, sha256, sha512 };

struct StreamingParams {
  size_t key_size = 32;  // AES-256; 16 for AES-128
  HkdfHash hash = HkdfHash::sha256;
  size_t segment_size = 1 << 20;  // ciphertext segment size (Tink's AES256_GCM_HKDF_1MB)
};

inline constexpr size_t kNoncePrefixSize = 7;
inline constexpr size_t kTagSize = 16;

// Decryption failed: wrong key or associated data, tampering, truncation, reordering.
class DecryptionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

size_t header_size(const StreamingParams& p);
// Memory the encryptors and decryptors have taken from the allocator for the segments in hand,
// counted since the process started (tests: a stream of any length needs a few, not one per
// segment).
std::uint64_t segment_buffers_allocated();
// Ciphertext size of a plaintext of n bytes.
std::uint64_t ciphertext_size(std::uint64_t plaintext_size, const StreamingParams& p);

// The plaintext size of a ciphertext of n bytes; nullopt when no plaintext encrypts to that
// size (a damaged object).
std::optional<std::uint64_t> plaintext_size(std::uint64_t ciphertext_size,
                                            const StreamingParams& p);

// Reading plaintext bytes [first, first + length) of an object whose ciphertext is object_size
// bytes: the ciphertext to read (the whole segments holding them), the segment it starts at,
// and how many plaintext bytes of that segment come before `first`.
struct RangeReading {
  std::uint64_t ciphertext_first = 0, ciphertext_length = 0;
  std::uint32_t segment = 0;
  std::uint64_t skip = 0;
};
RangeReading range_reading(std::uint64_t first, std::uint64_t length, std::uint64_t object_size,
                           const StreamingParams& p);

// Decrypting part of an object (a byte range) instead of all of it: the object's header, read
// apart, the segment the ciphertext given starts at, and the object's whole ciphertext size,
// which says which segment is the last (its nonce differs). The ciphertext given may stop at any
// segment's end; it must start at `segment`'s start (see range_reading()).
struct Resume {
  std::string header;
  std::uint32_t segment = 0;
  std::uint64_t object_size = 0;
};

class EncryptingSource final : public ByteSource {
 public:
  // key must be key_size bytes. salt and nonce_prefix are random unless given (tests only).
  EncryptingSource(ByteSource& plaintext, const std::string& key,
                   const std::string& associated_data, StreamingParams params = {},
                   std::optional<std::string> salt = std::nullopt,
                   std::optional<std::string> nonce_prefix = std::nullopt);
  ~EncryptingSource() override;
  size_t read(std::span<char> out) override;
  std::optional<std::uint64_t> size() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The same format, pushed: plaintext written in arrives at `out` as ciphertext, a segment at a
// time (one segment of plaintext buffered). finish() seals the last segment; without it the
// ciphertext is incomplete and will not decrypt (a truncated upload cannot pass for a whole one).
class EncryptingWriter final : public ByteSink {
 public:
  EncryptingWriter(ByteSink& out, const std::string& key, const std::string& associated_data,
                   StreamingParams params = {}, std::optional<std::string> salt = std::nullopt,
                   std::optional<std::string> nonce_prefix = std::nullopt);
  ~EncryptingWriter() override;
  void write(std::span<const char> plaintext) override;
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class DecryptingSource final : public ByteSource {
 public:
  DecryptingSource(ByteSource& ciphertext, const std::string& key,
                   const std::string& associated_data, StreamingParams params = {},
                   std::optional<Resume> resume = std::nullopt);
  ~DecryptingSource() override;
  // Throws DecryptionError.
  size_t read(std::span<char> out) override;
  std::optional<std::uint64_t> size() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relay::crypto
