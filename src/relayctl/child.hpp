#pragma once
// A child process of `relayctl up` whose output is copied, line by line, to ours with a
// "[name] " prefix, so that every component's log reads in one terminal.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace relay::ctl {

class Child {
 public:
  Child(std::string name, std::vector<std::string> argv,
        const std::map<std::string, std::string>& env);
  ~Child();  // SIGKILL if still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  void signal(int sig);
  std::optional<int> poll();                           // exit code once it has exited
  std::optional<int> wait(std::chrono::milliseconds);  // polls until the deadline

 private:
  std::string name_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::thread reader_;
  std::optional<int> code_;
};

void print_line(const std::string& line);  // serialised with the children's lines

}  // namespace relay::ctl
