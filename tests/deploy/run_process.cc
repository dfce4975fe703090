#include "tests/deploy/run_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace peregrine {
namespace {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  void Reset(int fd) { Close(); fd_ = fd; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

absl::Status MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& extra_env,
                                         const std::string& stdin_text) {
  if (argv.empty()) return absl::InvalidArgumentError("RunProcess: empty argv");
  Fd in_r, in_w, out_r, out_w, err_r, err_w;
  for (auto [r, w] : {std::pair<Fd*, Fd*>{&in_r, &in_w}, {&out_r, &out_w}, {&err_r, &err_w}}) {
    if (absl::Status s = MakePipe(*r, *w); !s.ok()) return s;
  }

  // Environment: ours, with extra_env overriding by name.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    env[entry.substr(0, entry.find('='))] = entry;
  }
  for (const std::string& entry : extra_env) env[entry.substr(0, entry.find('='))] = entry;
  std::vector<char*> envp;
  for (auto& [name, entry] : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  in_r.Close();
  out_w.Close();
  err_w.Close();

  // Feed stdin and drain both outputs without blocking on any one of them.
  ProcessResult result;
  size_t written = 0;
  if (stdin_text.empty()) in_w.Close();
  ::signal(SIGPIPE, SIG_IGN);
  absl::Status io_error;
  while (out_r.get() >= 0 || err_r.get() >= 0) {
    pollfd fds[3];
    int n = 0;
    if (out_r.get() >= 0) fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_r.get() >= 0) fds[n++] = {err_r.get(), POLLIN, 0};
    if (in_w.get() >= 0) fds[n++] = {in_w.get(), POLLOUT, 0};
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      io_error = absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_w.get()) {
        const ssize_t w = ::write(in_w.get(), stdin_text.data() + written, stdin_text.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 || written == stdin_text.size()) in_w.Close();
        continue;
      }
      char buf[65536];
      const ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
      Fd& src = fds[i].fd == out_r.get() ? out_r : err_r;
      std::string& dst = fds[i].fd == out_r.get() ? result.out : result.err;
      if (r > 0) {
        dst.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        src.Close();
      }
    }
  }
  in_w.Close();
  out_r.Close();
  err_r.Close();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (!io_error.ok()) return io_error;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace peregrine
