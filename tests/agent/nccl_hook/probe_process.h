// Test helpers for the nccl_hook suite: the paths of the hook and probe, a communicator id
// as the probe prints it, and a child process started with posix_spawn (own environment,
// stdout/stderr to a file), killed and reaped on destruction if still running.
#ifndef PEREGRINE_TESTS_AGENT_NCCL_HOOK_PROBE_PROCESS_H_
#define PEREGRINE_TESTS_AGENT_NCCL_HOOK_PROBE_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

extern char** environ;

namespace peregrine::testing {

inline std::string HookPath() { return std::string(PEREGRINE_BINARY_DIR) + "/lib/libperegrine_nccl.so"; }
inline std::string ProbePath() { return std::string(PEREGRINE_BINARY_DIR) + "/bin/nccl-hook-probe"; }
inline std::string SimNcclDir() { return std::string(PEREGRINE_BINARY_DIR) + "/lib/sim"; }
inline constexpr const char* kRealNcclDir = "/usr/local/cuda/lib64";

// `v` as 16 lowercase hex digits (how the probe prints a unique id's hash).
inline std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

class Child {
 public:
  // env entries override (or, with an empty value, remove) variables of this process.
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
        const std::string& output_path)
      : output_path_(output_path) {
    std::map<std::string, std::string> merged;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : env) {
      if (v.empty()) {
        merged.erase(k);
      } else {
        merged[k] = v;
      }
    }
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Waits up to `timeout` for exit; returns the exit status, or -1 (timeout / signal).
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    if (pid_ <= 0) return -1;
    if (reaped_) return exit_code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  std::string Output() const {
    std::ifstream in(output_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // key=value lines of the output.
  std::map<std::string, std::string> Values() const {
    std::map<std::string, std::string> out;
    std::istringstream in(Output());
    std::string line;
    while (std::getline(in, line)) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos && line.find(' ') > eq) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }

 private:
  std::string output_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_NCCL_HOOK_PROBE_PROCESS_H_
