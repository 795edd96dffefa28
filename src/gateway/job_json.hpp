#pragma once
// What the gateway says about a job, shared by the API and the webhook sender.

#include <string>

#include "redis/job_record.hpp"

namespace relay::gateway {

// A job record as the API's JSON (SPEC §2); webhook bodies are the same document.
std::string job_json(const JobRecord& r);

}  // namespace relay::gateway
