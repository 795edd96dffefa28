#include "gateway/api_keys.hpp"

#include <fstream>
#include <iterator>
#include <stdexcept>

#include "common/log.hpp"
#include "common/periodic.hpp"
#include "common/text.hpp"
#include "config/shared.hpp"

namespace relay::gateway {

namespace {

bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace

std::variant<ApiKeyTable, std::string> parse_api_keys_file(std::string_view text) {
  ApiKeyTable keys;
  int number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    line = trim_ows(line);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "line " + std::to_string(number) + ": ";
    // Entries are separated by commas too: the same Secret serves as RELAY_AUTH_API_KEYS.
    for (const std::string_view entry : comma_items(line)) {
      const auto eq = entry.find('=');
      if (eq == std::string_view::npos) return where + "expected <sha256 hex>=<tenant>";
      const std::string hash(trim_ows(entry.substr(0, eq)));
      const std::string tenant(trim_ows(entry.substr(eq + 1)));
      if (!is_sha256_hex(hash)) return where + "keys are the lowercase hex SHA-256 of the API key";
      if (!keys.emplace(hash, tenant).second) return where + "a key listed twice";
    }
  }
  return keys;
}

std::optional<std::string> api_keys_problem(const ApiKeyTable& keys,
                                            const std::set<std::string>& operator_hashes) {
  for (const auto& [hash, tenant] : keys) {
    const std::string which = "the key " + hash.substr(0, 8) + "...: ";
    if (!is_sha256_hex(hash)) return "keys are the lowercase hex SHA-256 of the API key";
    if (!config::is_safe_name(tenant))
      return which + "tenant names may use letters, digits, '-', '_' and '.'";
    if (operator_hashes.count(hash)) return which + "an operator key may not be a tenant's";
  }
  return std::nullopt;
}

ApiKeys::ApiKeys(ApiKeyTable fixed, std::string file, std::set<std::string> operator_hashes,
                 Watch watch)
    : fixed_(std::move(fixed)),
      file_(std::move(file)),
      operator_hashes_(std::move(operator_hashes)) {
  loaded_ = stamp_of(file_);
  auto keys = load_api_keys(fixed_, file_, operator_hashes_);
  if (auto* problem = std::get_if<std::string>(&keys))
    throw std::runtime_error("auth.api_keys_file: " + *problem);
  table_ = std::make_shared<const ApiKeyTable>(std::move(std::get<ApiKeyTable>(keys)));
  if (!file_.empty() && watch == Watch::yes)
    watcher_ = std::jthread([this](std::stop_token stop) {
      run_periodically({"api keys file check", kCheckEvery,
                        [this] {
                          reload();
                          return false;
                        }},
                       stop);
    });
}

ApiKeys::~ApiKeys() = default;  // (the watcher stops and joins first: declared last)

std::optional<std::string> ApiKeys::tenant(std::string_view key_hash) const {
  const auto keys = [this] {
    std::lock_guard lock(mu_);
    return table_;
  }();
  const auto it = keys->find(key_hash);
  if (it == keys->end()) return std::nullopt;
  return it->second;
}

std::variant<ApiKeyTable, std::string> load_api_keys(const ApiKeyTable& fixed,
                                                     const std::string& file,
                                                     const std::set<std::string>& operator_hashes) {
  ApiKeyTable keys = fixed;
  if (file.empty()) return keys;
  std::ifstream in(file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  if (!in.is_open() || in.bad()) return "cannot read " + file;
  auto parsed = parse_api_keys_file(text);
  if (auto* problem = std::get_if<std::string>(&parsed)) return *problem;
  for (auto& [hash, tenant] : std::get<ApiKeyTable>(parsed)) {
    auto [it, added] = keys.emplace(hash, tenant);
    if (!added && it->second != tenant)
      return "the key " + hash.substr(0, 8) + "... names another tenant in auth.api_keys";
  }
  if (auto problem = api_keys_problem(keys, operator_hashes)) return *problem;
  return keys;
}

bool ApiKeys::reload() {
  const FileStamp now = stamp_of(file_);
  if (now == loaded_ || now == refused_) return false;  // (refused_: logged already)
  auto keys = load_api_keys(fixed_, file_, operator_hashes_);
  if (auto* problem = std::get_if<std::string>(&keys)) {
    log::warn("API keys file changed but is not valid; the keys before it stay in use",
              {{"file", file_}, {"error", *problem}});
    refused_ = now;
    return false;
  }
  const auto count = std::get<ApiKeyTable>(keys).size();
  auto table = std::make_shared<const ApiKeyTable>(std::move(std::get<ApiKeyTable>(keys)));
  {
    std::lock_guard lock(mu_);
    table_.swap(table);
  }  // (the old table is freed here, outside the lock)
  loaded_ = now;
  refused_ = {};
  log::info("API keys file read again", {{"file", file_}, {"keys", count}});
  return true;
}

}  // namespace relay::gateway
