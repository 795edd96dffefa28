// relayctl encrypt / decrypt: a file to or from the format of stored objects (Tink's streaming
// AEAD), for an operator with the key: inspecting an input, re-encrypting after an incident.

#include <filesystem>
#include <fstream>
#include <iostream>

#include "crypto/keyring.hpp"
#include "crypto/streaming_aead.hpp"
#include "relayctl/commands.hpp"

namespace relay::ctl {

int crypt(const Options& o, bool encrypt) {
  try {
    auto ring = crypto::Keyring::load(crypto::Keyring::process_environment(), o.keys_dir);
    auto key = ring.get(o.key_id);
    if (!key)
      throw std::invalid_argument("no key '" + o.key_id + "' (set RELAY_ENCRYPTION_KEY_" +
                                  o.key_id + ")");
    crypto::StreamingParams sp{32, crypto::HkdfHash::sha256, static_cast<size_t>(o.segment_size)};
    FileSource in(o.file);
    std::unique_ptr<ByteSource> xf;
    if (encrypt)
      xf = std::make_unique<crypto::EncryptingSource>(in, *key, o.aad, sp);
    else
      xf = std::make_unique<crypto::DecryptingSource>(in, *key, o.aad, sp);
    // Written to a temporary file and renamed: a failed decryption leaves no partial output.
    std::string tmp = o.out_path + ".part";
    {
      std::ofstream out(tmp, std::ios::binary);
      std::string buf(1 << 20, '\0');
      while (size_t n = xf->read(buf)) out.write(buf.data(), static_cast<std::streamsize>(n));
      if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, o.out_path);
    return 0;
  } catch (const crypto::DecryptionError& e) {
    std::filesystem::remove(o.out_path + ".part");
    std::cerr << "relayctl: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::filesystem::remove(o.out_path + ".part");
    std::cerr << "relayctl: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace relay::ctl
