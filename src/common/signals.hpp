#pragma once
// Shutdown signals are taken by one thread with sigwait: block them before any thread starts
// (threads inherit the mask). SIGUSR1 is only used to wake that thread at exit.
// The gateway and the relay block them at load, in a constructor that runs before main and
// before every other static initializer (priority 101, the first a program may use): until
// then a SIGTERM ends the process by its default action — killed by the signal, exit status
// 143 under Kubernetes, where both promise 0. Blocked at the start of main (after static
// initialization and the command line), a one-shot relay sent SIGTERM just after it was started
// died so (the chaos test, 2026-12-07); what is left unprotected is the dynamic loader's work.

#include <signal.h>
#include <unistd.h>

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

// For stateless servers (the example models): SIGTERM and SIGINT end the process at once with
// exit code 0. Needed because a container's PID 1 gets no default signal actions — the kernel
// drops a SIGTERM it has no handler for, and Kubernetes then waits the whole grace period and
// sends SIGKILL. Only _exit is async-signal-safe here; there is nothing to flush.
inline void exit_on_shutdown_signals() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { ::_exit(0); };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace relay
