#pragma once
// Encryption keys (SPEC §7): id -> 32-byte key, from the environment (RELAY_ENCRYPTION_KEY_<ID>,
// base64) and from files (one per key in encryption.keys_dir, named by id, containing base64) —
// never from the YAML file. Ids are case-insensitive (held lowercase). Several keys can be loaded
// at once: the active one encrypts new objects, the others still decrypt, so keys rotate
// without downtime.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crypto/streaming_aead.hpp"

namespace relay::crypto {

struct EncryptionConfig {
  bool enabled = false;
  std::string active_key;  // id
  std::string keys_dir;    // optional
  std::int64_t segment_size = 1 << 20;
};

class Keyring {
 public:
  // env: the process environment as name=value pairs. Throws std::invalid_argument naming the
  // variable or file of a malformed key.
  static Keyring load(const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& keys_dir);
  static std::vector<std::pair<std::string, std::string>> process_environment();

  void add(const std::string& id, const std::string& key);
  std::optional<std::string> get(const std::string& id) const;
  std::vector<std::string> ids() const;

 private:
  std::map<std::string, std::string> keys_;
};

// What the gateway and the relay need: the keyring, the active key and the format's parameters.
struct Encryption {
  bool enabled = false;
  std::string active_id;
  Keyring keyring;
  StreamingParams params;
  // Throws config::ConfigError-compatible std::invalid_argument naming encryption.active_key
  // when encryption is on and the active key is not loaded.
  static Encryption from(const EncryptionConfig& c, Keyring keyring);
};

// Associated data binding an object to its job and role (SPEC §7).
inline std::string input_aad(const std::string& job_id) {
  return job_id + "/input";
}
inline std::string result_aad(const std::string& job_id) {
  return job_id + "/result.json";
}

}  // namespace relay::crypto
