#pragma once
// Standard Webhooks signing (https://www.standardwebhooks.com): webhook-signature is
// "v1,<base64 HMAC-SHA256 over '<id>.<timestamp>.<body>'>" with the secret's bytes, the secret
// being written "whsec_<base64>".

#include <optional>
#include <string>

namespace relay::gateway {

// The key bytes of "whsec_<base64>"; nullopt when malformed.
std::optional<std::string> decode_webhook_secret(const std::string& whsec);
std::string sign_webhook(const std::string& key, const std::string& id, long long timestamp,
                         const std::string& body);

std::string base64_encode(const std::string& bytes);
std::optional<std::string> base64_decode(const std::string& text);

}  // namespace relay::gateway
