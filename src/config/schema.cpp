#include "config/schema.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

#include "common/time.hpp"

namespace relay::config {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) return std::string(v);
    return std::nullopt;
  };
}

std::string env_name(const std::string& key) {
  std::string out = "RELAY_";
  for (char c : key)
    out += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

namespace {

[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& why) {
  throw ConfigError("config key '" + key + "': " + why + " (got '" + value + "')");
}

std::map<std::string, std::string> parse_pairs(const std::string& key, const std::string& text) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) bad(key, text, "expected name=value[,name=value...]");
      if (!out.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
        bad(key, text, "'" + item.substr(0, eq) + "' is given twice");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Flattens nested maps into dotted keys; sequences are not used by any key. A key given twice
// is refused: YAML requires keys to be unique, yet yaml-cpp keeps both, and the second would
// silently replace the first.
void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, YAML::Node>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string k =
          prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
      if (!out.emplace(k, kv.second).second)
        throw ConfigError("config key '" + k + "': given twice");
      flatten(kv.second, k, out);
    }
  }
}

}  // namespace

void Schema::string(std::string key, std::string* out, std::string def, std::string doc) {
  entries_.push_back({key, def, std::move(doc), false, [out, def] { *out = def; },
                      [out](const std::string& v) { *out = v; }, nullptr, nullptr});
}

void Schema::duration(std::string key, std::chrono::milliseconds* out, std::string def,
                      std::string doc, std::chrono::milliseconds min) {
  auto parsed = parse_duration(def);
  if (!parsed || *parsed < min) throw std::logic_error("bad default for " + key);
  if (min > kPositive) doc += " At least `" + format_duration(min) + "`.";
  entries_.push_back({key, def, std::move(doc), false, [out, d = *parsed] { *out = d; },
                      [out, key, min](const std::string& v) {
                        auto d = parse_duration(v);
                        if (!d) bad(key, v, "expected a duration such as 250ms, 60s, 5m, 1h");
                        if (*d < min)
                          bad(key, v,
                              min == std::chrono::milliseconds(1)
                                  ? std::string("must be positive")
                                  : "must be at least " + format_duration(min));
                        *out = *d;
                      },
                      nullptr, nullptr});
}

void Schema::integer(std::string key, std::int64_t* out, std::int64_t def, std::int64_t min,
                     std::int64_t max, std::string doc) {
  entries_.push_back(
      {key, std::to_string(def), std::move(doc), false, [out, def] { *out = def; },
       [out, key, min, max](const std::string& v) {
         std::int64_t n = 0;
         auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
         if (ec != std::errc{} || p != v.data() + v.size()) bad(key, v, "expected an integer");
         if (n < min || n > max)
           bad(key, v, "must be between " + std::to_string(min) + " and " + std::to_string(max));
         *out = n;
       },
       nullptr, nullptr});
}

void Schema::boolean(std::string key, bool* out, bool def, std::string doc) {
  entries_.push_back({key, def ? "true" : "false", std::move(doc), false,
                      [out, def] { *out = def; },
                      [out, key](const std::string& v) {
                        if (v == "true" || v == "1" || v == "yes")
                          *out = true;
                        else if (v == "false" || v == "0" || v == "no")
                          *out = false;
                        else
                          bad(key, v, "expected true or false");
                      },
                      nullptr, nullptr});
}

void Schema::string_map(std::string key, std::map<std::string, std::string>* out,
                        std::map<std::string, std::string> def, std::string doc) {
  std::string def_text;
  for (const auto& [k, v] : def) def_text += (def_text.empty() ? "" : ",") + k + "=" + v;
  entries_.push_back({key, def_text, std::move(doc), true, [out, def] { *out = def; },
                      [out, key](const std::string& v) { *out = parse_pairs(key, v); },
                      [out](const std::map<std::string, std::string>& m) { *out = m; }, nullptr});
}

void Schema::section(std::string key, std::string def_text, std::string doc,
                     std::function<void()> set_default,
                     std::function<void(const YAML::Node&)> from_yaml,
                     std::function<void(const std::string&)> from_env) {
  entries_.push_back({std::move(key), std::move(def_text), std::move(doc), true,
                      std::move(set_default), std::move(from_env), nullptr, std::move(from_yaml)});
}

void Schema::load(const YAML::Node& root, const EnvLookup& env) const {
  for (const auto& e : entries_) e.set_default();
  if (root && !root.IsNull()) {
    if (!root.IsMap()) throw ConfigError("config file: the top level must be a mapping");
    std::map<std::string, YAML::Node> flat;
    flatten(root, "", flat);
    std::set<std::string> known;
    for (const auto& e : entries_) known.insert(e.key);
    for (const auto& [k, node] : flat) {
      // A key is valid if it is an entry, a parent of an entry, or inside a map entry.
      bool entry = known.count(k) > 0, section = false, in_map = false;
      for (const auto& e : entries_) {
        if (e.key.starts_with(k + ".")) section = true;
        if (e.is_map && k.starts_with(e.key + ".")) in_map = true;
      }
      // A section given as a value or a list (`server: [...]`) would leave every key in it at
      // its default without a word: the file was meant otherwise.
      if (section && !entry && !node.IsMap() && !node.IsNull())
        throw ConfigError("config key '" + k + "': expected a mapping of its keys (" + k +
                          ".<key>: value)");
      if (entry || section || in_map) continue;
      // Inside a key that takes one value: that key was given a mapping.
      for (const auto& e : entries_)
        if (!e.is_map && !e.set_node && k.starts_with(e.key + "."))
          throw ConfigError("config key '" + e.key + "': expected a single value, not a mapping");
      throw ConfigError("config key '" + k + "': unknown key");
    }
    for (const auto& e : entries_) {
      auto it = flat.find(e.key);
      if (it == flat.end()) continue;
      const YAML::Node& n = it->second;
      if (e.set_node) {
        try {
          e.set_node(n);
        } catch (const YAML::Exception& ex) {
          throw ConfigError("config key '" + e.key + "': " + ex.what());
        }
      } else if (e.is_map) {
        if (!n.IsMap())
          throw ConfigError("config key '" + e.key + "': expected a mapping of name: value");
        std::map<std::string, std::string> m;
        for (const auto& kv : n) {
          if (!kv.second.IsScalar())
            throw ConfigError("config key '" + e.key + "." + kv.first.as<std::string>() +
                              "': expected a string");
          if (!m.emplace(kv.first.as<std::string>(), kv.second.as<std::string>()).second)
            throw ConfigError("config key '" + e.key + "." + kv.first.as<std::string>() +
                              "': given twice");
        }
        e.set_map(m);
      } else {
        if (!n.IsScalar()) throw ConfigError("config key '" + e.key + "': expected a single value");
        e.set(n.as<std::string>());
      }
    }
  }
  for (const auto& e : entries_) {
    if (auto v = env(env_name(e.key))) e.set(*v);
  }
}

void Schema::load_file(const std::string& path, const EnvLookup& env) const {
  YAML::Node root;
  if (!path.empty()) {
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
      throw ConfigError("config file '" + path + "': cannot be read");
    } catch (const YAML::Exception& e) {
      throw ConfigError("config file '" + path + "': " + e.what());
    }
  }
  load(root, env);
}

void Schema::load_string(const std::string& yaml, const EnvLookup& env) const {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("config: ") + e.what());
  }
  load(root, env);
}

std::string Schema::reference_markdown() const {
  std::string out = "| key | environment | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& e : entries_) {
    out += "| `" + e.key + "` | `" + env_name(e.key) + "` | " +
           (e.def.empty() ? "" : "`" + e.def + "`") + " | " + e.doc + " |\n";
  }
  return out;
}

}  // namespace relay::config
