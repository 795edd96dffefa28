#pragma once
#include <stdexcept>

namespace relay {

// Thrown by any blocking stage when its stop_token fires (cancel, lease lost, shutdown). The job
// runner catches it once and decides, from the stop reason, what the job's outcome is.
class Aborted : public std::runtime_error {
 public:
  Aborted() : std::runtime_error("aborted") {}
};

}  // namespace relay
