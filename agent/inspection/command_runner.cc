#include "agent/inspection/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace peregrine {
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

absl::Status Errno(const char* what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout, size_t max_output_bytes) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("empty argv");
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return Errno("pipe", errno);
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t default_signals;
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGPIPE);
  sigaddset(&default_signals, SIGTERM);
  sigaddset(&default_signals, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  out_write.Reset();
  err_write.Reset();
  if (rc != 0) {
    if (rc == ENOENT || rc == EACCES || rc == ENOEXEC || rc == ENOTDIR) {
      return absl::NotFoundError(
          absl::StrCat("cannot execute '", argv[0], "': ", std::strerror(rc)));
    }
    return Errno("posix_spawnp", rc);
  }

  CommandResult result;
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  bool out_open = true, err_open = true, timed_out = false;
  char buf[16384];
  while (out_open || err_open) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    const int wait_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1);
    pollfd fds[2];
    int n = 0;
    if (out_open) fds[n++] = {out_read.get(), POLLIN, 0};
    if (err_open) fds[n++] = {err_read.get(), POLLIN, 0};
    const int ready = poll(fds, n, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return Errno("poll", errno);
    }
    for (int i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const bool is_out = fds[i].fd == out_read.get();
      const ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        (is_out ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = is_out ? result.stdout_text : result.stderr_text;
      const size_t room = max_output_bytes > dst.size() ? max_output_bytes - dst.size() : 0;
      dst.append(buf, std::min<size_t>(room, static_cast<size_t>(got)));
      if (static_cast<size_t>(got) > room) result.truncated = true;
    }
  }
  int status = 0;
  if (timed_out) {
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::DeadlineExceededError(absl::StrCat("'", absl::StrJoin(argv, " "),
                                                    "' did not finish within ",
                                                    absl::FormatDuration(timeout)));
  }
  // Output is closed; the child may still be exiting (or a grandchild kept no pipe).
  while (true) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return Errno("waitpid", errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "'", argv[0], "' closed its output but did not exit within ",
          absl::FormatDuration(timeout)));
    }
    usleep(1000);
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
    result.exit_code = 128 + result.term_signal;
  }
  return result;
}

CommandRunner DefaultCommandRunner() {
  return [](const std::vector<std::string>& argv, absl::Duration timeout) {
    return RunCommand(argv, timeout);
  };
}

}  // namespace peregrine
