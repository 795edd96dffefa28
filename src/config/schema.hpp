#pragma once
// A config schema binds YAML keys to struct fields. One table per binary drives parsing, the
// environment-variable overrides, validation messages and the reference printed by
// `--print-config` — so the docs cannot drift from the code.
//
// Rule for environment variables (SPEC §9): key "a.b_c" is overridden by RELAY_A_B_C. A map key
// ("inference.routes") is overridden as a whole by "name=value,name=value".

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace relay::config {

// A bad config value: the message always names the key.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// "a.b_c" -> "RELAY_A_B_C"
std::string env_name(const std::string& key);

// The usual minimums of Schema::duration.
inline constexpr std::chrono::milliseconds kZeroAllowed{0};
inline constexpr std::chrono::milliseconds kPositive{1};

class Schema {
 public:
  void string(std::string key, std::string* out, std::string def, std::string doc);
  // Values below `min` are refused. Most durations need one: a zero here is a timeout that
  // fires at once, an expiry Redis refuses, or a loop that never sleeps.
  void duration(std::string key, std::chrono::milliseconds* out, std::string def, std::string doc,
                std::chrono::milliseconds min);
  void integer(std::string key, std::int64_t* out, std::int64_t def, std::int64_t min,
               std::int64_t max, std::string doc);
  void boolean(std::string key, bool* out, bool def, std::string doc);
  void string_map(std::string key, std::map<std::string, std::string>* out,
                  std::map<std::string, std::string> def, std::string doc);

  // A structured section (e.g. service_types: name -> {model, operations, ...}). from_yaml gets
  // the section's node; from_env its environment variable's text. Both throw ConfigError.
  void section(std::string key, std::string def_text, std::string doc,
               std::function<void()> set_default, std::function<void(const YAML::Node&)> from_yaml,
               std::function<void(const std::string&)> from_env);

  // Applies defaults, then the YAML document, then the environment. Unknown YAML keys are an
  // error: a typo must not silently fall back to a default.
  void load(const YAML::Node& root, const EnvLookup& env) const;
  void load_file(const std::string& path, const EnvLookup& env) const;  // "" = no file
  void load_string(const std::string& yaml, const EnvLookup& env) const;

  // Markdown table: key, env variable, default, description.
  std::string reference_markdown() const;

 private:
  struct Entry {
    std::string key;
    std::string def;  // as written in YAML
    std::string doc;
    bool is_map = false;
    std::function<void()> set_default;
    std::function<void(const std::string&)> set;  // throws ConfigError naming the key
    std::function<void(const std::map<std::string, std::string>&)> set_map;
    std::function<void(const YAML::Node&)> set_node;  // sections
  };
  std::vector<Entry> entries_;
};

}  // namespace relay::config
