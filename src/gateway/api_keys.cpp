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

std::string_view value_name(KeyKind kind) {
  return kind == KeyKind::tenant ? "tenant" : "role";
}

// A source's keys: its configuration's, then its file's beside them.
std::variant<ApiKeyTable, KeyProblem> gather(const KeySource& src) {
  for (const auto& [hash, value] : src.fixed)
    if (auto problem = key_entry_problem(hash, value, src.kind))
      return KeyProblem{src.config_key, *problem};
  ApiKeyTable keys = src.fixed;
  if (src.file.empty()) return keys;
  const std::string file_key = src.config_key + "_file";
  std::ifstream in(src.file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  if (!in.is_open() || in.bad()) return KeyProblem{file_key, "cannot read " + src.file};
  auto parsed = parse_api_keys_file(text, src.kind);
  if (auto* problem = std::get_if<std::string>(&parsed)) return KeyProblem{file_key, *problem};
  for (auto& [hash, value] : std::get<ApiKeyTable>(parsed)) {
    auto [it, added] = keys.emplace(hash, value);
    if (!added && it->second != value)
      return KeyProblem{file_key, "the key " + hash.substr(0, 8) + "... has another " +
                                      std::string(value_name(src.kind)) + " in " + src.config_key};
  }
  return keys;
}

}  // namespace

std::optional<std::string> key_entry_problem(std::string_view hash, std::string_view value,
                                             KeyKind kind) {
  if (!is_sha256_hex(hash)) return "keys are the lowercase hex SHA-256 of the key";
  const std::string which = "the key " + std::string(hash.substr(0, 8)) + "...: ";
  if (kind == KeyKind::role) {
    if (value != "admin" && value != "read") return which + "the role is admin or read";
  } else if (!config::is_safe_name(std::string(value))) {
    return which + "tenant names may use letters, digits, '-', '_' and '.'";
  }
  return std::nullopt;
}

std::variant<ApiKeyTable, std::string> parse_api_keys_file(std::string_view text, KeyKind kind) {
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
      if (eq == std::string_view::npos)
        return where + "expected <sha256 hex>=<" + std::string(value_name(kind)) + ">";
      const std::string hash(trim_ows(entry.substr(0, eq)));
      const std::string value(trim_ows(entry.substr(eq + 1)));
      if (auto problem = key_entry_problem(hash, value, kind)) return where + *problem;
      if (!keys.emplace(hash, value).second) return where + "a key listed twice";
    }
  }
  return keys;
}

std::variant<KeyTables, KeyProblem> load_keys(const KeySource& tenants,
                                              const KeySource& operators) {
  KeyTables out;
  for (auto [src, into] : {std::pair{&tenants, &out.tenants}, {&operators, &out.operators}}) {
    auto keys = gather(*src);
    if (auto* problem = std::get_if<KeyProblem>(&keys)) return std::move(*problem);
    *into = std::move(std::get<ApiKeyTable>(keys));
  }
  for (const auto& [hash, role] : out.operators)
    if (out.tenants.count(hash))
      return KeyProblem{
          operators.fixed.count(hash) ? operators.config_key : operators.config_key + "_file",
          "the key " + hash.substr(0, 8) + "...: an operator key may not be a tenant's"};
  return out;
}

ApiKeys::ApiKeys(KeySource tenants, KeySource operators, Watch watch)
    : tenants_(std::move(tenants)), operators_(std::move(operators)) {
  loaded_ = stamps();
  auto tables = load_keys(tenants_, operators_);
  if (auto* problem = std::get_if<KeyProblem>(&tables))
    throw std::runtime_error(problem->config_key + ": " + problem->message);
  tables_ = std::make_shared<const KeyTables>(std::move(std::get<KeyTables>(tables)));
  const bool files = !tenants_.file.empty() || !operators_.file.empty();
  if (files && watch == Watch::yes)
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

ApiKeys::Stamps ApiKeys::stamps() const {
  return {stamp_of(tenants_.file), stamp_of(operators_.file)};
}

std::shared_ptr<const KeyTables> ApiKeys::tables() const {
  std::lock_guard lock(mu_);
  return tables_;
}

std::optional<std::string> ApiKeys::tenant(std::string_view key_hash) const {
  const auto t = tables();
  const auto it = t->tenants.find(key_hash);
  if (it == t->tenants.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> ApiKeys::operator_role(std::string_view key_hash) const {
  const auto t = tables();
  const auto it = t->operators.find(key_hash);
  if (it == t->operators.end()) return std::nullopt;
  return it->second;
}

bool ApiKeys::reload() {
  const Stamps now = stamps();
  if (now == loaded_ || now == refused_) return false;  // (refused_: logged already)
  auto loaded = load_keys(tenants_, operators_);
  if (auto* problem = std::get_if<KeyProblem>(&loaded)) {
    log::warn("a keys file changed but is not valid; the keys before it stay in use",
              {{"key", problem->config_key}, {"error", problem->message}});
    refused_ = now;
    return false;
  }
  auto tables = std::make_shared<const KeyTables>(std::move(std::get<KeyTables>(loaded)));
  const auto tenants = tables->tenants.size(), operators = tables->operators.size();
  {
    std::lock_guard lock(mu_);
    tables_.swap(tables);
  }  // (the old tables are freed here, outside the lock)
  loaded_ = now;
  refused_ = {};
  log::info("keys files read again", {{"tenant_keys", tenants}, {"operator_keys", operators}});
  return true;
}

}  // namespace relay::gateway
