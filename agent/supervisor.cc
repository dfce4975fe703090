#include "agent/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "agent/log_tail.h"

// How the Supervisor keeps its children on a leash.
//
// Each ProcessSpec becomes one child, started by fork + execve (never a shell)
// in its own process group (pgid == pid) so that it and everything it spawns
// can be signalled together. stdin is /dev/null; stdout and stderr share one
// non-blocking pipe whose lines go to the spec's log file and into a bounded
// per-process tail. Children get PR_SET_PDEATHSIG=SIGKILL: if the agent dies,
// its training dies with it (in a pod the agent is the entrypoint anyway).
//
// Constructing a Supervisor makes the calling process a child subreaper
// (PR_SET_CHILD_SUBREAPER): descendants orphaned by a training process are
// re-parented to the agent and reaped by Poll's orphan sweep, so the agent,
// often PID 1 in its container, never accumulates zombies.
//
// The owner drives the Supervisor by polling OutputFds() for readability (plus
// SIGCHLD or a short timeout) and calling Poll(). A process group counts as gone
// only when its leader was reaped AND no member remains (kill(-pgid, 0) fails
// with ESRCH), so a grandchild that ignores SIGTERM keeps the stop open until
// the SIGKILL.
//
// RunTool's children are registered so the orphan sweep leaves them alone.

namespace peregrine {
namespace {

// Children that RunTool waits for itself; the orphan sweep must not reap them.
absl::Mutex foreign_mu;
absl::flat_hash_set<pid_t>& ForeignChildren() ABSL_EXCLUSIVE_LOCKS_REQUIRED(foreign_mu) {
  static auto* set = new absl::flat_hash_set<pid_t>();
  return *set;
}

std::string ErrnoText(int err) { return std::strerror(err); }

void CloseFd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

bool GroupAlive(pid_t pgid) {
  if (::kill(-pgid, 0) == 0) return true;
  return errno != ESRCH;
}

// Everything the child needs, prepared before fork (the child may not allocate).
struct ExecImage {
  std::string path;
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;

  void Seal() {
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

std::string PathFromEnv(const std::vector<std::string>& env) {
  for (const auto& entry : env) {
    if (entry.rfind("PATH=", 0) == 0) return entry.substr(5);
  }
  return "/usr/local/bin:/usr/bin:/bin";
}

// fork + execve into a new process group with stdout/stderr on `out_write`.
// Returns the pid once the exec succeeded (an exec failure is reported through
// a close-on-exec pipe, and the failed child is reaped here).
absl::StatusOr<pid_t> SpawnInNewGroup(ExecImage& image, int out_write) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for exec status: ", ErrnoText(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", ErrnoText(err)));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig == SIGKILL || sig == SIGSTOP) continue;
      ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      if (null_fd != 0) ::close(null_fd);
    }
    ::dup2(out_write, 1);
    ::dup2(out_write, 2);
    if (out_write > 2) ::close(out_write);
    ::execve(image.path.c_str(), image.argv.data(), image.envp.data());
    int err = errno;
    ssize_t ignored = ::write(err_pipe[1], &err, sizeof(err));
    (void)ignored;
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::InvalidArgumentError(
        absl::StrCat("execve ", image.path, ": ", ErrnoText(child_errno)));
  }
  // Mirror the child's setpgid so the group exists whatever the scheduling was.
  ::setpgid(pid, pid);
  return pid;
}

void AppendToFd(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a full disk must not stop training; the tail still has the lines
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

absl::StatusOr<std::string> ResolveExecutable(std::string_view name_view, std::string_view path_view) {
  const std::string name(name_view);
  const std::string path_env(path_view);
  if (name.empty()) return absl::InvalidArgumentError("empty command: argv[0] is empty");
  auto check = [](const std::string& candidate) -> absl::Status {
    struct stat st;
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("no such executable file: ", candidate));
    }
    if (::access(candidate.c_str(), X_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("not executable: ", candidate));
    }
    return absl::OkStatus();
  };
  if (name.find('/') != std::string::npos) {
    std::string candidate(name);
    absl::Status status = check(candidate);
    if (!status.ok()) return status;
    return candidate;
  }
  absl::Status first_denied = absl::OkStatus();
  for (absl::string_view dir : absl::StrSplit(path_env, ':')) {
    if (dir.empty()) dir = ".";
    std::string candidate = absl::StrCat(dir, "/", name);
    absl::Status status = check(candidate);
    if (status.ok()) return candidate;
    if (absl::IsPermissionDenied(status) && first_denied.ok()) first_denied = status;
  }
  if (!first_denied.ok()) return first_denied;
  return absl::NotFoundError(
      absl::StrCat("executable \"", name, "\" not found on PATH \"", path_env, "\""));
}

struct Supervisor::Child {
  Child(size_t tail_lines, size_t max_line_bytes) : assembler(max_line_bytes), tail(tail_lines) {}
  int global_rank = -1;
  pid_t pid = 0;
  int out_fd = -1;
  int log_fd = -1;
  LineAssembler assembler;
  LogTail tail;
  bool reaped = false;
  bool group_gone = false;
  int exit_code = 0;
  int signal = 0;
};

Supervisor::Supervisor() : Supervisor(Options{}) {}

Supervisor::Supervisor(Options options) : options_(options) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

Supervisor::~Supervisor() {
  KillAllAndWait();
  for (auto& child : children_) {
    CloseFd(child->out_fd);
    CloseFd(child->log_fd);
  }
}

bool Supervisor::Idle() const {
  for (const auto& child : children_) {
    if (!child->reaped || !child->group_gone) return false;
  }
  return true;
}

absl::Status Supervisor::Start(std::vector<ProcessSpec> specs) {
  if (!Idle()) {
    return absl::FailedPreconditionError("cannot start: processes of the previous start are still alive");
  }
  if (specs.empty()) return absl::InvalidArgumentError("nothing to start: no process specs");
  // Resolve everything first so a bad spec starts nothing.
  std::vector<ExecImage> images(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const ProcessSpec& spec = specs[i];
    if (spec.argv.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", spec.global_rank, ": empty argv"));
    }
    absl::StatusOr<std::string> path = ResolveExecutable(spec.argv[0], PathFromEnv(spec.env));
    if (!path.ok()) {
      return absl::Status(path.status().code(),
                          absl::StrCat("rank ", spec.global_rank, ": ", path.status().message()));
    }
    images[i].path = *path;
    images[i].argv_storage = spec.argv;
    images[i].env_storage = spec.env;
    images[i].Seal();
  }
  for (auto& child : children_) {
    CloseFd(child->out_fd);
    CloseFd(child->log_fd);
  }
  children_.clear();
  stopping_ = false;
  killed_ = false;
  kill_deadline_ = absl::InfiniteFuture();

  for (size_t i = 0; i < specs.size(); ++i) {
    auto child = std::make_unique<Child>(options_.tail_lines, options_.max_line_bytes);
    child->global_rank = specs[i].global_rank;
    if (!specs[i].log_path.empty()) {
      child->log_fd = ::open(specs[i].log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (child->log_fd < 0) {
        absl::Status status = absl::FailedPreconditionError(
            absl::StrCat("rank ", specs[i].global_rank, ": cannot open log file ", specs[i].log_path,
                         ": ", ErrnoText(errno)));
        KillAllAndWait();
        return status;
      }
      if (!specs[i].log_header.empty()) AppendToFd(child->log_fd, absl::StrCat(specs[i].log_header, "\n"));
    }
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      absl::Status status = absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
      CloseFd(child->log_fd);
      KillAllAndWait();
      return status;
    }
    absl::StatusOr<pid_t> pid = SpawnInNewGroup(images[i], out[1]);
    ::close(out[1]);
    if (!pid.ok()) {
      ::close(out[0]);
      CloseFd(child->log_fd);
      KillAllAndWait();
      return absl::Status(pid.status().code(),
                          absl::StrCat("rank ", specs[i].global_rank, ": ", pid.status().message()));
    }
    ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
    child->pid = *pid;
    child->out_fd = out[0];
    children_.push_back(std::move(child));
  }
  return absl::OkStatus();
}

void Supervisor::SignalAll(int signo) {
  for (auto& child : children_) {
    if (child->group_gone) continue;
    if (::kill(-child->pid, signo) != 0 && errno == ESRCH && child->reaped) child->group_gone = true;
  }
}

void Supervisor::BeginStop(absl::Duration grace, absl::Time now) {
  if (Idle()) return;
  if (!stopping_) {
    stopping_ = true;
    killed_ = false;
    kill_deadline_ = now + grace;
  } else {
    kill_deadline_ = std::min(kill_deadline_, now + grace);
  }
  SignalAll(SIGCONT);
  SignalAll(SIGTERM);
}

std::vector<int> Supervisor::OutputFds() const {
  std::vector<int> fds;
  for (const auto& child : children_) {
    if (child->out_fd >= 0) fds.push_back(child->out_fd);
  }
  return fds;
}

std::optional<absl::Time> Supervisor::NextDeadline() const {
  if (stopping_ && !killed_) return kill_deadline_;
  return std::nullopt;
}

void Supervisor::DrainOutput(Child& child, PollResult* result, size_t max_bytes) {
  if (child.out_fd < 0) return;
  char buffer[65536];
  size_t total = 0;
  while (total < max_bytes) {
    ssize_t n = ::read(child.out_fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      CloseOutput(child, result);
      return;
    }
    if (n == 0) {
      CloseOutput(child, result);
      return;
    }
    total += static_cast<size_t>(n);
    for (std::string& line : child.assembler.Append(std::string_view(buffer, static_cast<size_t>(n)))) {
      if (child.log_fd >= 0) AppendToFd(child.log_fd, absl::StrCat(line, "\n"));
      child.tail.Add(line);
      result->lines.push_back(OutputLine{child.global_rank, child.pid, std::move(line)});
    }
  }
}

void Supervisor::CloseOutput(Child& child, PollResult* result) {
  for (std::string& line : child.assembler.Flush()) {
    if (child.log_fd >= 0) AppendToFd(child.log_fd, absl::StrCat(line, "\n"));
    child.tail.Add(line);
    result->lines.push_back(OutputLine{child.global_rank, child.pid, std::move(line)});
  }
  CloseFd(child.out_fd);
}

void Supervisor::SweepOrphans() {
  const pid_t self = ::getpid();
  absl::flat_hash_set<pid_t> tracked;
  for (const auto& child : children_) tracked.insert(child->pid);
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  std::vector<pid_t> zombies;
  while (struct dirent* entry = ::readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0) continue;
    std::ifstream stat_file(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat;
    if (!std::getline(stat_file, stat)) continue;
    // "pid (comm) S ppid ..."; comm may contain spaces and parentheses.
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 4 > stat.size()) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::string_view(stat).substr(close_paren + 2), ' ');
    if (fields.size() < 2) continue;
    pid_t ppid = 0;
    if (fields[0] != "Z" || !absl::SimpleAtoi(fields[1], &ppid) || ppid != self) continue;
    if (tracked.contains(pid)) continue;
    zombies.push_back(pid);
  }
  ::closedir(proc);
  if (zombies.empty()) return;
  absl::MutexLock lock(&foreign_mu);
  for (pid_t pid : zombies) {
    if (ForeignChildren().contains(pid)) continue;
    int status;
    ::waitpid(pid, &status, WNOHANG);
  }
}

PollResult Supervisor::Poll(absl::Time now, bool sweep_orphans) {
  PollResult result;
  const bool was_idle = Idle();
  for (auto& child : children_) DrainOutput(*child, &result, 1 << 20);

  std::vector<ProcessExitReport> exits;
  for (auto& child : children_) {
    if (child->reaped) continue;
    int status = 0;
    pid_t r = ::waitpid(child->pid, &status, WNOHANG);
    if (r != child->pid) continue;
    child->reaped = true;
    if (WIFEXITED(status)) {
      child->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      child->signal = WTERMSIG(status);
      child->exit_code = 128 + child->signal;
    }
    // Everything the process wrote is in the pipe now.
    DrainOutput(*child, &result, SIZE_MAX);
    for (std::string& line : child->assembler.Flush()) {
      if (child->log_fd >= 0) AppendToFd(child->log_fd, absl::StrCat(line, "\n"));
      child->tail.Add(line);
      result.lines.push_back(OutputLine{child->global_rank, child->pid, std::move(line)});
    }
    ProcessExitReport report;
    report.global_rank = child->global_rank;
    report.pid = child->pid;
    report.exit_code = child->signal == 0 ? child->exit_code : 0;
    report.signal = child->signal;
    report.during_stop = stopping_;
    report.tail = child->tail.Lines();
    exits.push_back(std::move(report));
  }

  bool waiting_for_members = false;
  for (auto& child : children_) {
    if (child->reaped && !child->group_gone) waiting_for_members = true;
  }
  if (sweep_orphans || waiting_for_members) SweepOrphans();
  for (auto& child : children_) {
    if (child->reaped && !child->group_gone && !GroupAlive(child->pid)) {
      child->group_gone = true;
      DrainOutput(*child, &result, SIZE_MAX);
      CloseOutput(*child, &result);
    }
  }

  if (stopping_ && !killed_ && now >= kill_deadline_) {
    killed_ = true;
    SignalAll(SIGCONT);
    SignalAll(SIGKILL);
  }
  if (Idle()) {
    stopping_ = false;
    if (!was_idle) result.became_idle = true;
  }
  result.exits = std::move(exits);
  return result;
}

std::vector<ProcessStatus> Supervisor::Processes() const {
  std::vector<ProcessStatus> out;
  for (const auto& child : children_) {
    ProcessStatus status;
    status.global_rank = child->global_rank;
    status.pid = child->pid;
    status.running = !child->reaped;
    status.exit_code = child->signal == 0 ? child->exit_code : 0;
    status.signal = child->signal;
    out.push_back(status);
  }
  return out;
}

std::vector<ProcessStatus> Supervisor::LiveProcesses() const {
  std::vector<ProcessStatus> out;
  for (const ProcessStatus& status : Processes()) {
    if (status.running) out.push_back(status);
  }
  return out;
}

void Supervisor::KillAllAndWait(absl::Duration limit) {
  if (Idle()) return;
  stopping_ = true;
  killed_ = true;
  SignalAll(SIGCONT);
  SignalAll(SIGKILL);
  Clock* clock = options_.clock;
  const absl::Time deadline = clock->Now() + limit;
  while (!Idle() && clock->Now() < deadline) {
    std::vector<int> fds = OutputFds();
    std::vector<pollfd> pfds;
    for (int fd : fds) pfds.push_back(pollfd{fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 5);
    Poll(clock->Now(), /*sweep_orphans=*/true);
    SignalAll(SIGKILL);
  }
  stopping_ = false;
}

absl::StatusOr<ToolRun> RunTool(const std::vector<std::string>& argv, absl::Duration timeout,
                                size_t max_output, Clock* clock) {
  if (argv.empty()) return absl::InvalidArgumentError("RunTool: empty argv");
  const char* path_env = std::getenv("PATH");
  absl::StatusOr<std::string> path =
      ResolveExecutable(argv[0], path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");
  if (!path.ok()) return path.status();
  ExecImage image;
  image.path = *path;
  image.argv_storage = argv;
  for (char** e = environ; *e != nullptr; ++e) image.env_storage.emplace_back(*e);
  image.Seal();

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  pid_t pid;
  {
    absl::MutexLock lock(&foreign_mu);
    absl::StatusOr<pid_t> spawned = SpawnInNewGroup(image, out[1]);
    ::close(out[1]);
    if (!spawned.ok()) {
      ::close(out[0]);
      return spawned.status();
    }
    pid = *spawned;
    ForeignChildren().insert(pid);
  }
  ToolRun run;
  const absl::Time deadline = clock->Now() + timeout;
  bool truncated = false;
  char buffer[16384];
  while (true) {
    absl::Duration left = deadline - clock->Now();
    if (left <= absl::ZeroDuration()) {
      run.timed_out = true;
      break;
    }
    pollfd pfd{out[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = ::read(out[0], buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (n == 0) break;
    size_t room = max_output > run.output.size() ? max_output - run.output.size() : 0;
    if (static_cast<size_t>(n) > room) truncated = true;
    run.output.append(buffer, std::min(room, static_cast<size_t>(n)));
  }
  ::close(out[0]);
  if (run.timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  const absl::Time wait_deadline = clock->Now() + (run.timed_out ? absl::Seconds(10) : timeout + absl::Seconds(1));
  while (true) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (clock->Now() > wait_deadline) {
      // Closed its output but still running past the timeout: kill it.
      run.timed_out = true;
      ::kill(-pid, SIGKILL);
    }
    ::poll(nullptr, 0, 5);
  }
  ::kill(-pid, SIGKILL);  // anything the tool left behind in its group
  {
    absl::MutexLock lock(&foreign_mu);
    ForeignChildren().erase(pid);
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  if (truncated) run.output.append("\n...[output truncated]");
  return run;
}

}  // namespace peregrine
