#pragma once
// Shutdown signals are taken by one thread with sigwait: block them before any thread starts
// (threads inherit the mask). SIGUSR1 is only used to wake that thread at exit.

#include <signal.h>

namespace relay {

inline sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

}  // namespace relay
