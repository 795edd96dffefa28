// Interoperability of our streaming AEAD with an independent implementation of Tink's format
// (tests/crypto/tink_stream.py on Debian's python3-cryptography), in both directions.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "crypto/streaming_aead.hpp"
#include "harness.hpp"

namespace relay::testing {
namespace {

std::string run_python(const std::string& mode, const std::string& key_hex, const std::string& aad,
                       size_t segment, const std::string& input, int* status) {
  TempDir dir;
  std::string in = dir.path() + "/in", out = dir.path() + "/out";
  std::ofstream(in, std::ios::binary) << input;
  std::string cmd = std::string("/usr/bin/python3 ") + RELAY_TEST_TINK_PY + " " + mode + " " +
                    key_hex + " " + aad + " " + std::to_string(segment) + " < " + in + " > " + out +
                    " 2>/dev/null";
  *status = std::system(cmd.c_str());
  std::ifstream f(out, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string drain(ByteSource& s) {
  std::string out, buf(65536, '\0');
  while (size_t n = s.read(buf)) out.append(buf.data(), n);
  return out;
}

TEST(CryptoInterop, BothDirectionsForEverySizeThatMatters) {
  const std::string key_hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
  std::string key;
  for (size_t i = 0; i < 32; ++i) key += static_cast<char>(i);
  for (size_t segment : {size_t{4096}, size_t{1} << 20}) {
    crypto::StreamingParams p{32, crypto::HkdfHash::sha256, segment};
    const size_t first = segment - crypto::header_size(p) - crypto::kTagSize;
    for (size_t n :
         {size_t{0}, size_t{1}, first - 1, first, first + 1, first + 3 * (segment - 16) + 5}) {
      std::string pt(n, '\0');
      for (size_t i = 0; i < n; ++i) pt[i] = static_cast<char>((i * 131) >> 3);
      // Ours -> theirs.
      MemorySource src(pt);
      crypto::EncryptingSource enc(src, key, "job-1/input", p);
      std::string ours = drain(enc);
      int status = 0;
      EXPECT_EQ(run_python("decrypt", key_hex, "job-1/input", segment, ours, &status), pt)
          << "segment " << segment << " n " << n;
      EXPECT_EQ(status, 0);
      // Theirs -> ours.
      std::string theirs = run_python("encrypt", key_hex, "job-1/input", segment, pt, &status);
      ASSERT_EQ(status, 0);
      EXPECT_EQ(theirs.size(), crypto::ciphertext_size(n, p));
      MemorySource csrc(theirs);
      crypto::DecryptingSource dec(csrc, key, "job-1/input", p);
      EXPECT_EQ(drain(dec), pt) << "segment " << segment << " n " << n;
      // And the independent side refuses a wrong binding too.
      run_python("decrypt", key_hex, "job-2/input", segment, ours, &status);
      EXPECT_NE(status, 0);
    }
  }
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

TEST(CryptoInterop, RelayctlEncryptsAndDecryptsForOperators) {
  TempDir dir;
  const std::string pt = dir.path() + "/pt", ct = dir.path() + "/ct", back = dir.path() + "/back";
  std::ofstream(pt, std::ios::binary) << std::string(3'000'000, 'r');
  const std::string env = "RELAY_ENCRYPTION_KEY_OPS=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= ";
  const std::string ctl = std::string(RELAY_TEST_RELAYCTL_BIN);
  ASSERT_EQ(std::system((env + ctl + " encrypt --key ops --aad j/input " + pt + " " + ct).c_str()),
            0);
  // The independent implementation reads what relayctl wrote.
  std::string cmd = std::string("/usr/bin/python3 ") + RELAY_TEST_TINK_PY +
                    " decrypt 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f "
                    "j/input 1048576 < " +
                    ct + " | cmp -s - " + pt;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_EQ(
      std::system((env + ctl + " decrypt --key ops --aad j/input " + ct + " " + back).c_str()), 0);
  EXPECT_EQ(std::system(("cmp -s " + pt + " " + back).c_str()), 0);
  // Wrong binding: exit 3, and no output file at all.
  int status = std::system((env + ctl + " decrypt --key ops --aad k/input " + ct + " " +
                            dir.path() + "/nope 2>/dev/null")
                               .c_str());
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/nope"));
}

}  // namespace
}  // namespace relay::testing
