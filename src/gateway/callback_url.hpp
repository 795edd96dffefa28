#pragma once
// Where webhooks may go (SSRF): checked at submission, and again, with the addresses pinned,
// when a webhook is sent. The rules are http/destination.hpp's.

#include "http/destination.hpp"

namespace relay::gateway {

inline std::optional<http::DestinationProblem> check_callback_url(
    const std::string& url, bool allow_private, std::vector<std::string>* addresses = nullptr,
    http::Resolver* resolver = nullptr) {
  return http::check_destination(
      url, {{"http", "https"}, allow_private, "callback_url", "webhooks.allow_private"}, addresses,
      resolver);
}
using http::is_public_address;

}  // namespace relay::gateway
