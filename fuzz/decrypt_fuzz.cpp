// libFuzzer target for the streaming AEAD decryptor (issue 4). Three modes, picked by the first
// byte: (0) the input is a ciphertext, decrypted as is: it must decrypt or throw
// DecryptionError, nothing else; (1) the input is a plaintext plus damage instructions: it is
// encrypted, damaged (bit flips, truncation, appended bytes), decrypted: an undamaged stream
// must come back exactly, a damaged one must throw — and whatever was released before must be
// a prefix of the plaintext (nothing unverified ever leaves the decryptor); (2) a byte range of
// an encrypted plaintext, decrypted from its segments alone as the gateway serves a Range, the
// ciphertext perhaps with a bit flipped: exactly the range's bytes when no byte it reads was
// damaged, else an error, and never a byte that is not the range's.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/byte_stream.hpp"
#include "crypto/streaming_aead.hpp"

using namespace relay;

namespace {

std::string drain(ByteSource& s, std::string* released) {
  std::string buf(97, '\0');
  while (size_t n = s.read(buf)) released->append(buf.data(), n);
  return *released;
}

// Mode 2: bytes 0-3 choose the range and the damage, the rest is the plaintext.
int range_mode(const crypto::StreamingParams& p, const std::string& key, const std::string& input) {
  if (input.size() < 5) return 0;
  const auto b = [&](size_t i) { return static_cast<uint8_t>(input[i]); };
  const std::string plaintext = input.substr(4);
  const uint64_t first = (b(0) * 131u) % plaintext.size();
  const uint64_t length = 1 + (b(1) * 257u) % (plaintext.size() - first);
  MemorySource src(plaintext);
  crypto::EncryptingSource enc(src, key, "fuzz", p);
  std::string ct, tmp;
  ct = drain(enc, &tmp);
  const auto r = crypto::range_reading(first, length, ct.size(), p);
  const size_t hs = crypto::header_size(p);
  bool damaged = false;
  if (b(2) % 2) {  // one bit flipped somewhere; it matters if the range's reading covers it
    const size_t at = (b(2) * 263u + b(3)) % ct.size();
    ct[at] ^= static_cast<char>(1u << (b(3) % 8));
    damaged =
        at < hs || (at >= r.ciphertext_first && at < r.ciphertext_first + r.ciphertext_length);
  }
  const std::string expected = plaintext.substr(first, length);
  std::string released;
  try {
    MemorySource window(ct.substr(r.ciphertext_first, r.ciphertext_length));
    crypto::DecryptingSource dec(window, key, "fuzz", p,
                                 crypto::Resume{ct.substr(0, hs), r.segment, ct.size()});
    SliceSource slice(dec, r.skip, length);
    drain(slice, &released);
    if (damaged || released != expected) std::abort();  // damage unnoticed, or wrong bytes
  } catch (const std::runtime_error&) {  // DecryptionError, or the window ending early
    if (!damaged) std::abort();
    if (expected.compare(0, released.size(), released) != 0) std::abort();  // unverified bytes
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const crypto::StreamingParams p{32, crypto::HkdfHash::sha256,
                                  static_cast<size_t>(64 + data[1] % 64)};
  const std::string key(32, 'k');
  std::string input(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (data[0] % 3 == 2) return range_mode(p, key, input);
  if (data[0] % 3 == 0) {
    MemorySource src(input);
    crypto::DecryptingSource dec(src, key, "fuzz", p);
    std::string released;
    try {
      drain(dec, &released);
    } catch (const crypto::DecryptionError&) {
    }
    return 0;
  }
  // Mode 1: the first 4 bytes are damage instructions, the rest the plaintext.
  if (input.size() < 4) return 0;
  const uint8_t op = static_cast<uint8_t>(input[0]), where = static_cast<uint8_t>(input[1]),
                what = static_cast<uint8_t>(input[2]);
  std::string plaintext = input.substr(4);
  MemorySource src(plaintext);
  crypto::EncryptingSource enc(src, key, "fuzz", p);
  std::string ct, tmp;
  ct = drain(enc, &tmp);
  bool damaged = true;
  switch (op % 4) {
    case 0:
      damaged = false;
      break;
    case 1:
      ct[(where * 257u + what) % ct.size()] ^= static_cast<char>(1 + what % 255);
      break;
    case 2:
      ct.resize((where * 131u) % ct.size());
      break;
    case 3:
      ct.push_back(static_cast<char>(what));
      break;
  }
  MemorySource csrc(ct);
  crypto::DecryptingSource dec(csrc, key, "fuzz", p);
  std::string released;
  try {
    drain(dec, &released);
    if (damaged || released != plaintext) std::abort();  // damage went unnoticed, or a wrong result
  } catch (const crypto::DecryptionError&) {
    if (!damaged) std::abort();
    if (plaintext.compare(0, released.size(), released) != 0)
      std::abort();  // unverified bytes leaked
  }
  return 0;
}
