#include "crypto/keyring.hpp"

#include <openssl/evp.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace relay::crypto {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<std::string> decode_key(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  if (text.size() != 44) return std::nullopt;  // base64 of 32 bytes
  std::string out(33, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n != 33 || !text.ends_with("=") || text.ends_with("==")) return std::nullopt;
  out.resize(32);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Keyring::process_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

Keyring Keyring::load(const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& keys_dir) {
  static const std::string kPrefix = "RELAY_ENCRYPTION_KEY_";
  Keyring k;
  for (const auto& [name, value] : env) {
    if (!name.starts_with(kPrefix) || name.size() == kPrefix.size()) continue;
    auto key = decode_key(value);
    if (!key) throw std::invalid_argument(name + ": expected the base64 of 32 bytes");
    k.add(name.substr(kPrefix.size()), *key);
  }
  if (!keys_dir.empty()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(keys_dir, ec)) {
      // Kubernetes mounts secrets with dot-files and symlinks beside the keys.
      std::string id = entry.path().filename().string();
      if (id.empty() || id.front() == '.' || !entry.is_regular_file()) continue;
      std::ifstream f(entry.path());
      std::stringstream ss;
      ss << f.rdbuf();
      auto key = decode_key(ss.str());
      if (!key)
        throw std::invalid_argument(entry.path().string() + ": expected the base64 of 32 bytes");
      k.add(id, *key);
    }
    if (ec) throw std::invalid_argument("encryption.keys_dir '" + keys_dir + "': " + ec.message());
  }
  return k;
}

void Keyring::add(const std::string& id, const std::string& key) {
  keys_[lower(id)] = key;
}

std::optional<std::string> Keyring::get(const std::string& id) const {
  auto it = keys_.find(lower(id));
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Keyring::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, k] : keys_) out.push_back(id);
  return out;
}

Encryption Encryption::from(const EncryptionConfig& c, Keyring keyring) {
  Encryption e;
  e.enabled = c.enabled;
  e.active_id = lower(c.active_key);
  e.keyring = std::move(keyring);
  e.params = StreamingParams{32, HkdfHash::sha256, static_cast<size_t>(c.segment_size)};
  if (c.enabled) {
    if (e.active_id.empty())
      throw std::invalid_argument(
          "config key 'encryption.active_key': required when encryption.enabled");
    if (!e.keyring.get(e.active_id))
      throw std::invalid_argument("config key 'encryption.active_key': no key '" + e.active_id +
                                  "' loaded (set RELAY_ENCRYPTION_KEY_" + c.active_key +
                                  " or a file in encryption.keys_dir)");
  }
  return e;
}

}  // namespace relay::crypto
