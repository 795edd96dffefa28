#pragma once
// Who a key is: the tenants' API keys (auth.api_keys, auth.api_keys_file) and the operators'
// (admin.api_keys, admin.api_keys_file). Each file is read again when it changes — a mounted
// Kubernetes Secret is updated in place — so keys are added and revoked without restarting the
// gateway. Keys are held as their SHA-256 (hex), as configured.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>

#include "common/file_stamp.hpp"

namespace relay::gateway {

// SHA-256 (lowercase hex) of a key -> its tenant, or its operator's role.
using ApiKeyTable = std::map<std::string, std::string, std::less<>>;

// What a key maps to: a tenant (a safe name), or an operator's role on the dashboard.
enum class KeyKind { tenant, role };

// One kind of key: the configuration's and a file's (none: "").
struct KeySource {
  std::string config_key;  // "auth.api_keys" or "admin.api_keys"; the file's is it + "_file"
  KeyKind kind = KeyKind::tenant;
  ApiKeyTable fixed;
  std::string file;
};

struct KeyTables {
  ApiKeyTable tenants;    // hash -> tenant
  ApiKeyTable operators;  // hash -> "admin" or "read"
};

// What is wrong, and under which configuration key (the file's for what is in the file). Never
// a key itself, nor a file's line: they are secrets' neighbours.
struct KeyProblem {
  std::string config_key;
  std::string message;
};

// A keys file: one `<sha256 hex>=<tenant or role>` per line, or several separated by commas (the
// environment form of auth.api_keys: one Secret serves both); blank lines and `#` comments are
// skipped. The table, or what is wrong, with the line's number.
std::variant<ApiKeyTable, std::string> parse_api_keys_file(std::string_view text,
                                                           KeyKind kind = KeyKind::tenant);

// What is wrong with one entry (its hash, its tenant's name or its role), or nothing.
std::optional<std::string> key_entry_problem(std::string_view hash, std::string_view value,
                                             KeyKind kind);

// Both kinds, each its configuration's keys and its file's, checked as a whole (an operator's
// key may not be a tenant's). The configuration's check and each version the gateway reads go
// through it.
std::variant<KeyTables, KeyProblem> load_keys(const KeySource& tenants, const KeySource& operators);

class ApiKeys {
 public:
  static constexpr std::chrono::milliseconds kCheckEvery{2000};

  enum class Watch { yes, no };
  // Throws std::runtime_error when the keys are not valid (load_keys; the configuration has
  // checked them already: this is a file that changed in between). With a file and Watch::yes,
  // a thread checks the files every kCheckEvery until destruction.
  ApiKeys(KeySource tenants, KeySource operators, Watch watch = Watch::yes);
  ~ApiKeys();
  ApiKeys(const ApiKeys&) = delete;
  ApiKeys& operator=(const ApiKeys&) = delete;

  std::optional<std::string> tenant(std::string_view key_hash) const;
  std::optional<std::string> operator_role(std::string_view key_hash) const;
  // Whether operators' keys are configured at all (keys or a file): else there is no dashboard.
  bool has_operators() const { return !operators_.fixed.empty() || !operators_.file.empty(); }
  // Reads the files again if one changed; true when other keys are in use now. A version that
  // cannot be read or is not valid leaves the keys in use as they were, logged once.
  bool reload();

 private:
  using Stamps = std::pair<FileStamp, FileStamp>;
  Stamps stamps() const;
  std::shared_ptr<const KeyTables> tables() const;

  const KeySource tenants_;
  const KeySource operators_;
  // The tables in use, swapped whole. A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12's
  // locks a bit of the pointer, which ThreadSanitizer reports as a race; held for a copy.
  mutable std::mutex mu_;
  std::shared_ptr<const KeyTables> tables_;
  Stamps loaded_;                  // the reload thread's alone, as is
  std::optional<Stamps> refused_;  // the last versions found not valid
  std::jthread watcher_;
};

}  // namespace relay::gateway
