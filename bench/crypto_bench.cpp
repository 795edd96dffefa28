// crypto-bench — issue 4's benchmark: encrypt and decrypt throughput of the streaming AEAD for a
// 1 GiB stream on one core, beside `openssl speed -evp aes-256-gcm -bytes 16384` measured in the
// same run (target >= 80% of it), and peak RSS after 256 MiB and after 1 GiB (it must not grow
// with the stream), and the time to encrypt and to decrypt a 1 KiB object (what each small job's
// input and result cost beyond their bytes). Figures are printed, never asserted.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "crypto/streaming_aead.hpp"

using namespace relay;
using Clock = std::chrono::steady_clock;

namespace {

class Pattern final : public ByteSource {
 public:
  explicit Pattern(std::uint64_t n) : left_(n) {}
  size_t read(std::span<char> buf) override {
    size_t n = static_cast<size_t>(std::min<std::uint64_t>(buf.size(), left_));
    std::memset(buf.data(), 'x', n);
    left_ -= n;
    return n;
  }

 private:
  std::uint64_t left_;
};

double drain(ByteSource& s) {
  static std::string buf(1 << 20, '\0');
  auto t0 = Clock::now();
  while (s.read(buf) > 0) {
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

long hwm_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

double openssl_mbs() {
  FILE* p = ::popen("openssl speed -evp aes-256-gcm -bytes 16384 -seconds 3 -mr 2>/dev/null", "r");
  char line[512];
  double bps = 0;
  while (p && std::fgets(line, sizeof line, p)) {
    std::string l(line);
    if (l.rfind("+F:", 0) == 0) bps = std::atof(l.substr(l.rfind(':') + 1).c_str());
  }
  if (p) ::pclose(p);
  return bps / (1 << 20);
}

}  // namespace

int main() {
  const std::string key(32, 'k');
  const crypto::StreamingParams params;  // AES-256, HKDF-SHA256, 1 MiB segments
  auto run = [&](std::uint64_t n, double* enc_s, double* encdec_s) {
    Pattern p1(n);
    crypto::EncryptingSource enc(p1, key, "bench/input", params);
    *enc_s = drain(enc);
    Pattern p2(n);
    crypto::EncryptingSource enc2(p2, key, "bench/input", params);
    crypto::DecryptingSource dec(enc2, key, "bench/input", params);
    *encdec_s = drain(dec);
  };
  double e = 0, ed = 0;
  run(256ull << 20, &e, &ed);
  long hwm_small = hwm_kib();
  const std::uint64_t n = 1ull << 30;
  run(n, &e, &ed);
  long hwm_large = hwm_kib();
  double mib = static_cast<double>(n) / (1 << 20);
  double enc_mbs = mib / e, dec_mbs = mib / (ed - e);  // decrypt = (encrypt+decrypt) - encrypt
  // A 1 KiB object, as a queue benchmark's input (issue 14): the fixed cost per object — the
  // segment key's derivation (HKDF) and the cipher's setup — not the bytes.
  constexpr int kObjects = 20000;
  auto per_object_us = [&](bool decrypt) {
    const std::string plain(1024, 'x');
    auto t0 = Clock::now();
    for (int i = 0; i < kObjects; ++i) {
      MemorySource p(plain);
      crypto::EncryptingSource enc(p, key, "bench/input", params);
      if (decrypt) {
        crypto::DecryptingSource dec(enc, key, "bench/input", params);
        drain(dec);
      } else {
        drain(enc);
      }
    }
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kObjects;
  };
  const double enc_us = per_object_us(false), encdec_us = per_object_us(true);
  double ossl = openssl_mbs();
  std::printf(
      "Encryption benchmark: Tink AES-GCM-HKDF streaming, AES-256, 1 MiB segments, one core\n\n");
  std::printf("%-44s %12s %14s\n", "figure", "measured", "reference");
  std::printf("%-44s %8.0f MiB/s %14s\n", "openssl speed -evp aes-256-gcm (16 KiB)", ossl, "");
  std::printf("%-44s %8.0f MiB/s %9.0f%% (>= 80%%)\n", "encrypt 1 GiB", enc_mbs,
              100 * enc_mbs / ossl);
  std::printf("%-44s %8.0f MiB/s %9.0f%% (>= 80%%)\n", "decrypt 1 GiB", dec_mbs,
              100 * dec_mbs / ossl);
  std::printf("%-44s %6.1f / %.1f MiB %s\n", "peak RSS after 256 MiB / after 1 GiB",
              hwm_small / 1024.0, hwm_large / 1024.0, "(independent of the stream's size)");
  std::printf("%-44s %6.1f / %.1f us\n", "a 1 KiB object: encrypt / decrypt", enc_us,
              encdec_us - enc_us);
  return 0;
}
