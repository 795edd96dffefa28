#pragma once
// What execve() needs to start a child: argv and this process's environment with some
// variables set or replaced, as NULL-terminated arrays (built before fork: the child may not
// allocate). Used by relayctl's children and the tests' processes.

#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace relay {

class ExecArgs {
 public:
  ExecArgs(std::vector<std::string> argv, const std::map<std::string, std::string>& env)
      : args_(std::move(argv)) {
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      if (!env.count(kv.substr(0, kv.find('=')))) envs_.push_back(std::move(kv));
    }
    for (const auto& [k, v] : env) envs_.push_back(k + "=" + v);
    for (auto& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (auto& e : envs_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::vector<std::string> args_, envs_;
  std::vector<char*> argv_, envp_;
};

}  // namespace relay
