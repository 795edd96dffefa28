#include "relayctl/commands.hpp"

#include <cstdlib>
#include <stdexcept>

namespace relay::ctl {

std::string env_or(const char* name, std::string def) {
  const char* v = std::getenv(name);
  return v ? v : def;
}

// --param k=v ... as a JSON object.
boost::json::object parse_params(const std::vector<std::string>& params) {
  boost::json::object p;
  for (const auto& kv : params) {
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--param expects k=v, got '" + kv + "'");
    p[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return p;
}

std::string field(const boost::json::object& o, const char* k) {
  auto it = o.find(k);
  if (it == o.end() || it->value().is_null()) return "";
  if (it->value().is_string()) return std::string(it->value().as_string());
  return boost::json::serialize(it->value());
}

}  // namespace relay::ctl
