// ChildProcess: a real process started by a test, in its own process group, that is
// killed (SIGKILL to the whole group) and reaped when the object goes away, even when the
// test fails half-way. Optional stdin/stdout pipes for line-based control; stdout/stderr
// can go to files instead.
//
// Not thread-safe; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_CHILD_PROCESS_H_
#define PEREGRINE_TESTS_TESTING_CHILD_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace peregrine::testing {

class ChildProcess {
 public:
  struct Options {
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;  // added to / overriding the test's environment
    bool pipe_stdin = false;
    bool pipe_stdout = false;
    std::string stdout_path;  // when not piped: file (empty = /dev/null)
    std::string stderr_path;  // empty = inherit
  };

  // Starts the process; returns nullptr when fork/exec setup failed.
  static std::unique_ptr<ChildProcess> Start(const Options& o) {
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    if (o.pipe_stdin && pipe2(in_pipe, O_CLOEXEC) != 0) return nullptr;
    if (o.pipe_stdout && pipe2(out_pipe, O_CLOEXEC) != 0) return nullptr;
    std::vector<std::string> env_strings;
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) env[std::string(*e, eq - *e)] = eq + 1;
    }
    for (const auto& [k, v] : o.env) env[k] = v;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
      setpgid(0, 0);
      if (o.pipe_stdin) dup2(in_pipe[0], 0);
      if (o.pipe_stdout) {
        dup2(out_pipe[1], 1);
      } else {
        int fd = open(o.stdout_path.empty() ? "/dev/null" : o.stdout_path.c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1);
      }
      if (!o.stderr_path.empty()) {
        int fd = open(o.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    setpgid(pid, pid);
    auto child = std::unique_ptr<ChildProcess>(new ChildProcess(pid));
    if (o.pipe_stdin) {
      close(in_pipe[0]);
      child->stdin_fd_ = in_pipe[1];
    }
    if (o.pipe_stdout) {
      close(out_pipe[1]);
      child->stdout_fd_ = out_pipe[0];
    }
    return child;
  }

  ~ChildProcess() {
    if (!reaped_) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (stdin_fd_ >= 0) close(stdin_fd_);
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }

  pid_t pid() const { return pid_; }

  bool WriteLine(const std::string& line) {
    std::string s = line + "\n";
    signal(SIGPIPE, SIG_IGN);
    return write(stdin_fd_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  }

  // The next stdout line, or nullopt at EOF or when `timeout` passes.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = read(stdout_fd_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      buffer_.append(buf, n);
    }
  }

  // Waits for exit (polling with a deadline). Returns the wait status, or nullopt on
  // timeout (the process keeps running and is killed by the destructor).
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    if (reaped_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        status_ = status;
        kill(-pid_, SIGKILL);  // any grandchildren
        return status;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void Signal(int sig) {
    if (!reaped_) kill(pid_, sig);
  }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = 0;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
};

inline bool ExitedWith(const std::optional<int>& status, int code) {
  return status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_CHILD_PROCESS_H_
