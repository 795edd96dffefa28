#pragma once
// The tenants' API keys: auth.api_keys from the configuration, and auth.api_keys_file, read again
// when it changes — a mounted Kubernetes Secret is updated in place, so keys are added and
// revoked without restarting the gateway. Keys are held as their SHA-256 (hex), as configured.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <variant>

#include "common/file_stamp.hpp"

namespace relay::gateway {

// SHA-256 (lowercase hex) of a key -> its tenant.
using ApiKeyTable = std::map<std::string, std::string, std::less<>>;

// A keys file: one `<sha256 hex>=<tenant>` per line, or several separated by commas (the
// environment form of auth.api_keys: one Secret serves both); blank lines and `#` comments are
// skipped.
// The table, or what is wrong (with the line's number; never the line itself: it is a secret's
// neighbour).
std::variant<ApiKeyTable, std::string> parse_api_keys_file(std::string_view text);

// What is wrong with a table of tenants' keys (hashes, tenant names, an operator's key used as a
// tenant's), or nothing. Checked for the configuration's keys and each version of the file.
std::optional<std::string> api_keys_problem(const ApiKeyTable& keys,
                                            const std::set<std::string>& operator_hashes);

// The configuration's keys (fixed) and the file's, checked as a whole, or what is wrong with
// them. The configuration's check and each version the gateway reads go through it.
std::variant<ApiKeyTable, std::string> load_api_keys(const ApiKeyTable& fixed,
                                                     const std::string& file,
                                                     const std::set<std::string>& operator_hashes);

class ApiKeys {
 public:
  static constexpr std::chrono::milliseconds kCheckEvery{2000};

  enum class Watch { yes, no };
  // Throws std::runtime_error when the keys are not valid (load_api_keys; the configuration has
  // checked them already: this is a file that changed in between). With a file and Watch::yes,
  // a thread checks it every kCheckEvery until destruction.
  ApiKeys(ApiKeyTable fixed, std::string file, std::set<std::string> operator_hashes,
          Watch watch = Watch::yes);
  ~ApiKeys();
  ApiKeys(const ApiKeys&) = delete;
  ApiKeys& operator=(const ApiKeys&) = delete;

  std::optional<std::string> tenant(std::string_view key_hash) const;
  // Reads the file again if it changed; true when other keys are in use now. A version that
  // cannot be read or is not valid leaves the keys in use as they were, logged once.
  bool reload();

 private:
  const ApiKeyTable fixed_;
  const std::string file_;
  const std::set<std::string> operator_hashes_;
  // The table in use, swapped whole. A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12's
  // locks a bit of the pointer, which ThreadSanitizer reports as a race; held for a copy.
  mutable std::mutex mu_;
  std::shared_ptr<const ApiKeyTable> table_;
  FileStamp loaded_;                  // the reload thread's alone, as is
  std::optional<FileStamp> refused_;  // the last version found not valid
  std::jthread watcher_;
};

}  // namespace relay::gateway
