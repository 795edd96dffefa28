#pragma once
// Job ids: random 128-bit UUIDv4s in canonical lowercase form; every route validates them.

#include <string>
#include <string_view>

namespace relay {

std::string new_job_id();
bool is_valid_job_id(std::string_view id);

}  // namespace relay
