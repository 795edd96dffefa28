#include "gateway/webhook_signature.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace relay::gateway {

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4 + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t pad = text.size() >= 2 && text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::optional<std::string> decode_webhook_secret(const std::string& whsec) {
  if (!whsec.starts_with("whsec_")) return std::nullopt;
  auto key = base64_decode(whsec.substr(6));
  if (!key || key->empty()) return std::nullopt;
  return key;
}

std::string sign_webhook(const std::string& key, const std::string& id, long long timestamp,
                         const std::string& body) {
  std::string content = id + "." + std::to_string(timestamp) + "." + body;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(content.data()), content.size(), mac, &len);
  return "v1," + base64_encode(std::string(reinterpret_cast<char*>(mac), len));
}

}  // namespace relay::gateway
