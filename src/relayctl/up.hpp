#pragma once
#include <string>

namespace relay::ctl {

struct UpOptions {
  std::string data_dir;  // storage and Redis data; empty: a temporary folder (removed after --demo)
  int port = 8080;       // the gateway's; 0 = any free port
  int max_relays = 4;    // per model, as a ScaledJob's maxReplicaCount
  bool demo = false;     // submit the samples, check the results, stop, exit 0/1
  std::string samples_dir;
  int echo_delay_ms = 0;  // the echo model holds each answer this long (tests of the scaler)
};

// The whole stack on one machine (SPEC §12): redis-server, the example models, the gateway, and a
// local scaler starting relays as jobs wait. Returns the exit code.
int run_up(const UpOptions& o);

}  // namespace relay::ctl
