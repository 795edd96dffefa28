#pragma once
// Where a job's objects are stored (SPEC §6), relative to storage.url.

#include <string>
#include <string_view>

namespace relay {

inline std::string input_object_key(std::string_view service_type, std::string_view id) {
  return std::string(service_type) + "/" + std::string(id) + "/input";
}
inline std::string result_object_key(std::string_view service_type, std::string_view id) {
  return std::string(service_type) + "/" + std::string(id) + "/result.json";
}

}  // namespace relay
