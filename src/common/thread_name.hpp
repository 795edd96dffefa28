#pragma once
// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it (Linux keeps 15 bytes).
// A gateway runs some forty threads, a relay a dozen: unnamed, every one of them read as the
// process's name, and an operator could not tell the webhook workers' CPU from the request
// threads'.

#include <pthread.h>

#include <string>
#include <string_view>

namespace relay {

inline void name_this_thread(std::string_view name) {
  const std::string cut(name.substr(0, 15));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace relay
