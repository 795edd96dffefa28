#include "relayctl/child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "common/exec_args.hpp"

namespace relay::ctl {
namespace {
std::mutex out_mu;
}

void print_line(const std::string& line) {
  std::lock_guard lock(out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Child::Child(std::string name, std::vector<std::string> argv,
             const std::map<std::string, std::string>& env)
    : name_(std::move(name)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const ExecArgs exec(argv, env);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::setpgid(0, 0);  // Ctrl-C reaches relayctl only; it stops the children in order
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(exec.argv()[0], exec.argv(), exec.envp());
    std::perror(("relayctl: cannot run " + argv[0]).c_str());
    ::_exit(127);
  }
  ::close(fds[1]);
  out_fd_ = fds[0];
  reader_ = std::thread([this] {
    std::string buf, prefix = "[" + name_ + "] ";
    char chunk[4096];
    for (;;) {
      ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        print_line(prefix + buf.substr(0, nl));
        buf.erase(0, nl + 1);
      }
    }
    if (!buf.empty()) print_line(prefix + buf);
  });
}

Child::~Child() {
  if (!code_) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (reader_.joinable()) reader_.join();
  ::close(out_fd_);
}

void Child::signal(int sig) {
  if (!code_) ::kill(pid_, sig);
}

std::optional<int> Child::poll() {
  if (code_) return code_;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_)
    code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return code_;
}

std::optional<int> Child::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return code_;
}

}  // namespace relay::ctl
