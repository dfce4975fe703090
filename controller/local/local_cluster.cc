#include "controller/local/local_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/durable_file.h"
#include "base/free_port.h"
#include "controller/agent_credentials.h"
#include "controller/local/local_node_health.h"
#include "controller/status_json.h"

extern char** environ;

namespace peregrine {
namespace {

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Fields of /proc/<pid>/stat after the command name: state is [0], session [3], starttime [19].
bool ReadStat(pid_t pid, char* state, pid_t* session, unsigned long long* start_ticks) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  if (f.size() < 20) return false;
  *state = f[0].empty() ? '?' : f[0][0];
  *session = static_cast<pid_t>(std::strtol(f[3].c_str(), nullptr, 10));
  *start_ticks = std::strtoull(f[19].c_str(), nullptr, 10);
  return true;
}

// The state files (pods.json, the job status) survive a SIGKILL or a power loss whole:
// temp file, fsync, rename, fsync of the directory (base/durable_file.h).
absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  return WriteFileDurably(path, content);
}

std::string JobKeyOf(const TrainingJob& job) { return absl::StrCat(job.metadata.namespace_, "/", job.metadata.name); }

// A pod's checkpoint area, as its agent lays it out: <root>/<namespace>.<job>/<pod>.
std::string CheckpointArea(const std::string& root, const std::string& job_key, const std::string& pod) {
  std::string dir = job_key;
  std::replace(dir.begin(), dir.end(), '/', '.');
  return absl::StrCat(root, "/", dir, "/", pod);
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // best effort: an area already gone is fine
}

// Pod creation is crash-consistent (see CreatePod): each pod's launch is recorded in
// <state_dir>/pods/<pod>.pid, which the parent locks (flock) before fork. The child,
// before exec, writes "<pid> <starttime>" into it through the inherited descriptor, so the
// lock is held by one of the two from before the fork until the identity is on disk. A
// restarted controller that takes the lock therefore reads either nothing (no process was
// ever started) or the identity of the one that was.
std::string PidFilePath(const std::string& state_dir, const std::string& pod) {
  return absl::StrCat(state_dir, "/pods/", pod, ".pid");
}

// Async-signal-safe (the child runs it between fork and exec): the decimal text of `v`
// into `out`; returns its length.
size_t FormatDecimal(unsigned long long v, char* out) {
  char rev[24];
  size_t n = 0;
  do {
    rev[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = rev[n - 1 - i];
  return n;
}

// Async-signal-safe: this process's starttime (field 22 of /proc/self/stat); 0 if unread.
unsigned long long OwnStartTicks() {
  char buf[1024];
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  ssize_t close_paren = -1;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == ')') close_paren = i;
  }
  if (close_paren < 0) return 0;
  // After ") " come the fields from state (field 3); starttime is field 22: 19 more spaces.
  int field = 3;
  ssize_t i = close_paren + 2;
  for (; i < n && field < 22; ++i) {
    if (buf[i] == ' ') ++field;
  }
  unsigned long long v = 0;
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) v = v * 10 + static_cast<unsigned long long>(buf[i] - '0');
  return v;
}

// What a restarted controller finds of a pod whose launch was recorded but not its pid.
struct LaunchRecord {
  pid_t pid = 0;                      // 0: no process was started
  unsigned long long start_ticks = 0;
};

// Takes the pod's launch lock (waiting out a child that is still writing its identity, at
// most `timeout`) and reads what the child wrote.
absl::StatusOr<LaunchRecord> ReadLaunchRecord(const std::string& path, std::chrono::milliseconds timeout) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return LaunchRecord{};  // the intent was saved, the fork never came
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": still locked by a starting pod after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char buf[64] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  close(fd);
  LaunchRecord record;
  if (n <= 0) return record;
  std::vector<std::string> fields = absl::StrSplit(std::string(buf, static_cast<size_t>(n)), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  long pid = 0;
  if (fields.size() != 2 || (pid = std::strtol(fields[0].c_str(), nullptr, 10)) <= 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a launch record: '", std::string(buf, static_cast<size_t>(n)), "'"));
  }
  record.pid = static_cast<pid_t>(pid);
  record.start_ticks = std::strtoull(fields[1].c_str(), nullptr, 10);
  return record;
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("agent exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("agent killed by signal ", WTERMSIG(status));
  return "agent gone";
}

}  // namespace

std::vector<pid_t> ProcessesInSession(pid_t sid) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    char state;
    pid_t session;
    unsigned long long ticks;
    if (ReadStat(static_cast<pid_t>(pid), &state, &session, &ticks) && session == sid && state != 'Z') {
      out.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(dir);
  return out;
}

int SignalSession(pid_t sid, int sig) {
  int n = 0;
  for (pid_t pid : ProcessesInSession(sid)) n += kill(pid, sig) == 0 ? 1 : 0;
  return n;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Create(LocalClusterOptions options) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options.state_dir) / "logs", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", options.state_dir, ": ", ec.message()));
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  absl::MutexLock lock(&cluster->mu_);
  if (auto s = cluster->LoadPodTable(); !s.ok()) return s;
  return cluster;
}

LocalCluster::~LocalCluster() {
  // Reap our own children that already exited; live pods keep running (controller restart).
  absl::MutexLock lock(&mu_);
  for (auto& [name, pod] : pods_) {
    if (pod.own_child && !pod.exited) {
      int status;
      if (waitpid(pod.pid, &status, WNOHANG) == pod.pid) pod.exited = true;
    }
  }
}

absl::Status LocalCluster::LoadPodTable() {
  const std::string path = absl::StrCat(options_.state_dir, "/pods.json");
  std::ifstream in(path);
  if (!in) return absl::OkStatus();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    next_machine_ = j.value("nextMachine", 0);
    quarantined_ = j.value("quarantined", std::vector<std::string>{});
    free_machines_ = j.value("freeMachines", std::vector<std::string>{});
    for (const auto& p : j.at("pods")) {
      LocalPod pod;
      pod.name = p.at("name");
      pod.job_key = p.at("job");
      pod.machine_id = p.at("machineId");
      pod.pid = p.at("pid");
      pod.start_ticks = p.at("startTicks");
      pod.starting = p.value("state", "") == "starting";
      pod.exited = p.value("exited", false);
      pod.exit_reason = p.value("exitReason", "");
      pod.own_child = false;
      pods_[pod.name] = pod;
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": not a pod table: ", e.what()));
  }
  // A pod recorded as starting: the controller died between saving the intent and saving
  // the pid. Its launch record says whether a process was started (adopt it: the pid and
  // start time are checked like any re-adopted pod's) or not (drop the entry: the job's
  // next round creates the pod again). Never a second process for one pod.
  bool changed = false;
  for (auto it = pods_.begin(); it != pods_.end();) {
    LocalPod& pod = it->second;
    if (!pod.starting) {
      ++it;
      continue;
    }
    const std::string pid_file = PidFilePath(options_.state_dir, pod.name);
    absl::StatusOr<LaunchRecord> record = ReadLaunchRecord(pid_file, std::chrono::seconds(10));
    if (!record.ok()) return record.status();
    changed = true;
    if (record->pid == 0) {
      ::unlink(pid_file.c_str());
      it = pods_.erase(it);
      continue;
    }
    pod.starting = false;
    pod.pid = record->pid;
    pod.start_ticks = record->start_ticks;  // Refresh finds it gone if it exited since
    ++it;
  }
  if (changed) return SavePodTable();
  return absl::OkStatus();
}

absl::Status LocalCluster::SavePodTable() {
  nlohmann::json pods = nlohmann::json::array();
  for (const auto& [name, p] : pods_) {
    pods.push_back({{"name", p.name}, {"job", p.job_key}, {"machineId", p.machine_id}, {"pid", p.pid},
                    {"startTicks", p.start_ticks}, {"state", p.starting ? "starting" : "started"},
                    {"exited", p.exited}, {"exitReason", p.exit_reason}});
  }
  nlohmann::json j = {{"nextMachine", next_machine_},
                      {"quarantined", quarantined_},
                      {"freeMachines", free_machines_},
                      {"pods", pods}};
  return WriteFileAtomically(absl::StrCat(options_.state_dir, "/pods.json"), j.dump(2));
}

// The pod's credential in a file only its owner may read (0400, in a 0700 directory),
// created fresh (a stale one is replaced); the agent removes it once read.
absl::StatusOr<std::string> LocalCluster::WriteCredentialFile(const TrainingJob& job, const std::string& pod) {
  absl::StatusOr<std::string> credential = DeriveAgentCredential(
      options_.agent_key, AgentIdentity{job.metadata.namespace_, job.metadata.name, job.metadata.uid, pod});
  if (!credential.ok()) return credential.status();
  const std::string dir = absl::StrCat(options_.state_dir, "/credentials");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  const std::string path = absl::StrCat(dir, "/", pod);
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  const std::string text = *credential + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return path;
}

absl::Status LocalCluster::CreatePod(const TrainingJob& job, const PodToCreate& request) {
  absl::MutexLock lock(&mu_);
  if (auto it = pods_.find(request.name); it != pods_.end()) {
    if (it->second.delete_deadline_ns == 0) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("pod ", request.name, " is still being deleted"));
  }
  LocalPod pod;
  pod.name = request.name;
  pod.job_key = JobKeyOf(job);
  if (!free_machines_.empty()) {
    pod.machine_id = free_machines_.front();
    free_machines_.erase(free_machines_.begin());
  } else {
    pod.machine_id = absl::StrCat(next_machine_++);
  }

  // Everything the child needs is prepared before fork (only exec-safe calls after it).
  const std::string log_path = absl::StrCat(options_.state_dir, "/logs/", pod.name, ".log");
  std::vector<std::string> args = {options_.agent_binary,
                                   "--controller", options_.controller_address,
                                   "--job", pod.job_key,
                                   "--pod", pod.name,
                                   "--machine-id", pod.machine_id,
                                   "--role", request.role == PodRole::kStandby ? "standby" : "active",
                                   "--log-dir", absl::StrCat(options_.state_dir, "/logs/", pod.name),
                                   "--heartbeat-ms", absl::StrCat(options_.heartbeat_ms)};
  if (!options_.agent_key.empty()) {
    absl::StatusOr<std::string> credential_file = WriteCredentialFile(job, pod.name);
    if (!credential_file.ok()) return credential_file.status();
    args.push_back("--credential-file");
    args.push_back(*credential_file);
  }
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options_.pod_env) env[k] = v;
  std::string path;
  for (const auto& dir : options_.path_prepend) absl::StrAppend(&path, dir, ":");
  env["PATH"] = path + (env.count("PATH") ? env["PATH"] : "/usr/bin:/bin");
  env["PEREGRINE_POD"] = pod.name;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_fds = [&] {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
  };

  // Crash consistency: intent, launch, pid. (1) The pod is saved as "starting" before any
  // process exists; (2) its launch record is created empty and locked, and the child writes
  // its identity into it before exec (see ReadLaunchRecord); (3) the pid is saved. A
  // controller killed between (1) and (3) finds the entry on restart and adopts the process
  // the launch record names, or drops the entry when none was started (LoadPodTable).
  const std::string pid_dir = absl::StrCat(options_.state_dir, "/pods");
  if (::mkdir(pid_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    close_fds();
    return absl::InternalError(absl::StrCat("cannot create ", pid_dir, ": ", std::strerror(errno)));
  }
  const std::string pid_path = PidFilePath(options_.state_dir, pod.name);
  pod.starting = true;
  pods_[pod.name] = pod;
  if (absl::Status s = SavePodTable(); !s.ok()) {
    pods_.erase(pod.name);
    close_fds();
    return s;
  }
  const int pid_fd = open(pid_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (pid_fd < 0 || flock(pid_fd, LOCK_EX) != 0) {
    const std::string error = std::strerror(errno);
    if (pid_fd >= 0) close(pid_fd);
    close_fds();
    pods_.erase(pod.name);
    SavePodTable().IgnoreError();  // a starting entry without a launch record is dropped on load
    return absl::InternalError(absl::StrCat("cannot create the launch record ", pid_path, ": ", error));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string error = std::strerror(errno);
    close(pid_fd);
    close_fds();
    ::unlink(pid_path.c_str());
    pods_.erase(pod.name);
    SavePodTable().IgnoreError();
    return absl::UnavailableError(absl::StrCat("fork: ", error));
  }
  if (pid == 0) {
    setsid();
    // The launch record: "<pid> <starttime>\n", then the lock goes with the descriptor.
    char record[64];
    size_t n = FormatDecimal(static_cast<unsigned long long>(getpid()), record);
    record[n++] = ' ';
    n += FormatDecimal(OwnStartTicks(), record + n);
    record[n++] = '\n';
    if (pwrite(pid_fd, record, n, 0) != static_cast<ssize_t>(n)) _exit(126);
    close(pid_fd);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(pid_fd);
  close_fds();
  if (options_.launched_hook_for_test) options_.launched_hook_for_test(pod.name);
  pod.starting = false;
  pod.pid = pid;
  pod.own_child = true;
  char state;
  pid_t session;
  ReadStat(pid, &state, &session, &pod.start_ticks);
  pods_[pod.name] = pod;
  return SavePodTable();
}

void LocalCluster::Refresh(LocalPod& pod) {
  if (pod.exited) return;
  const bool was_exited = pod.exited;
  // waitpid also for re-adopted pods: when this process started them (a controller
  // restarted inside the same process, as in tests) it reaps them; otherwise ECHILD.
  {
    int status = 0;
    const pid_t r = waitpid(pod.pid, &status, WNOHANG);
    if (r == pod.pid) {
      pod.exited = true;
      pod.exit_reason = DescribeWait(status);
    } else if (r < 0 && errno == ECHILD) {
      pod.own_child = false;
    } else if (r == 0) {
      pod.own_child = true;
    }
  }
  if (!pod.exited && !pod.own_child) {
    char state;
    pid_t session;
    unsigned long long ticks = 0;
    if (!ReadStat(pod.pid, &state, &session, &ticks) || ticks != pod.start_ticks || state == 'Z') {
      pod.exited = true;
      pod.exit_reason = "agent process gone";
    }
  }
  if (pod.exited && !was_exited) {
    // The machine is gone: nothing of the pod may keep running (orphaned training ranks).
    // Once, right when the exit is seen, so a reused pid is never signalled later.
    SignalSession(pod.pid, SIGKILL);
  }
}

void LocalCluster::ReapDeleted() {
  const int64_t now = MonotonicNanos();
  bool changed = false;
  for (auto it = pods_.begin(); it != pods_.end();) {
    LocalPod& pod = it->second;
    if (pod.delete_deadline_ns == 0) {
      ++it;
      continue;
    }
    Refresh(pod);
    if (now >= pod.delete_deadline_ns) SignalSession(pod.pid, SIGKILL);
    if (pod.exited && ProcessesInSession(pod.pid).empty()) {
      if (!options_.checkpoint_root.empty()) RemoveTree(CheckpointArea(options_.checkpoint_root, pod.job_key, pod.name));
      ::unlink(PidFilePath(options_.state_dir, pod.name).c_str());
      it = pods_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) SavePodTable().IgnoreError();  // best effort: the next save writes the same table
}

absl::Status LocalCluster::DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(name);
  if (it == pods_.end() || it->second.job_key != JobKeyOf(job)) return absl::OkStatus();
  LocalPod& pod = it->second;
  if (pod.delete_deadline_ns == 0) {
    pod.delete_deadline_ns = MonotonicNanos() + int64_t{grace_ms} * 1'000'000;
    Refresh(pod);
    if (!pod.exited) kill(pod.pid, SIGTERM);  // the agent stops its training gracefully
  }
  ReapDeleted();
  return SavePodTable();
}

absl::StatusOr<std::vector<PodObservation>> LocalCluster::ListPods(const TrainingJob& job) {
  absl::MutexLock lock(&mu_);
  ReapDeleted();
  std::vector<PodObservation> out;
  const std::string key = JobKeyOf(job);
  bool changed = false;
  for (auto& [name, pod] : pods_) {
    if (pod.job_key != key || pod.delete_deadline_ns != 0) continue;
    const bool was_exited = pod.exited;
    Refresh(pod);
    changed |= pod.exited != was_exited;
    PodObservation obs;
    obs.name = pod.name;
    obs.machine_id = pod.machine_id;
    obs.running = !pod.exited;
    obs.failed = pod.exited;
    obs.reason = pod.exit_reason;
    out.push_back(std::move(obs));
  }
  if (changed) {
    if (auto s = SavePodTable(); !s.ok()) return s;
  }
  return out;
}

absl::Status LocalCluster::QuarantineMachine(const std::string& machine_id, const std::string& reason) {
  {
    std::ofstream out(absl::StrCat(options_.state_dir, "/events.log"), std::ios::app);
    out << "machine " << machine_id << " quarantined: " << reason << "\n";
  }
  {
    absl::MutexLock lock(&mu_);
    if (std::find(quarantined_.begin(), quarantined_.end(), machine_id) == quarantined_.end()) {
      quarantined_.push_back(machine_id);
    }
    free_machines_.erase(std::remove(free_machines_.begin(), free_machines_.end(), machine_id), free_machines_.end());
    if (auto s = SavePodTable(); !s.ok()) return s;
  }
  // Outside the lock: node health may call ReturnMachine.
  if (node_health_ != nullptr) return node_health_->Quarantine(machine_id, reason);
  return absl::OkStatus();
}

std::vector<std::string> LocalCluster::QuarantinedMachines() const {
  absl::MutexLock lock(&mu_);
  return quarantined_;
}

absl::Status LocalCluster::ReturnMachine(const std::string& machine_id) {
  absl::MutexLock lock(&mu_);
  quarantined_.erase(std::remove(quarantined_.begin(), quarantined_.end(), machine_id), quarantined_.end());
  if (std::find(free_machines_.begin(), free_machines_.end(), machine_id) == free_machines_.end()) {
    free_machines_.push_back(machine_id);
  }
  return SavePodTable();
}

std::vector<std::string> LocalCluster::FreeMachines() const {
  absl::MutexLock lock(&mu_);
  return free_machines_;
}

absl::Status LocalCluster::RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) {
  std::ofstream out(absl::StrCat(options_.state_dir, "/events.log"), std::ios::app);
  if (!out) return absl::InternalError("cannot append to events.log");
  out << FormatRfc3339(now) << " " << JobKeyOf(job) << " " << ToString(event.type) << " " << event.reason << ": "
      << event.message << "\n";
  return absl::OkStatus();
}

absl::Status LocalCluster::PersistStatus(const TrainingJob& job, const JobStatus& status) {
  return WriteFileAtomically(
      absl::StrCat(options_.state_dir, "/status-", job.metadata.namespace_, "-", job.metadata.name, ".json"),
      JobStatusToJson(status, 2));
}

absl::StatusOr<std::optional<JobStatus>> LocalCluster::LoadStatus(const TrainingJob& job) {
  const std::string path =
      absl::StrCat(options_.state_dir, "/status-", job.metadata.namespace_, "-", job.metadata.name, ".json");
  std::ifstream in(path);
  if (!in) return std::optional<JobStatus>();
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto status = JobStatusFromJson(buffer.str());
  if (!status.ok()) return absl::DataLossError(absl::StrCat(path, ": ", status.status().message()));
  return std::optional<JobStatus>(*status);
}

namespace {

// Rendezvous ports of a local job: the training store listens on the base port and the
// stop-time diagnosis and fail-slow validation use base+1 onwards (one per machine pair or
// replay group, about 3 x machines), all on 127.0.0.1 shared with every other program.
constexpr int kRendezvousBlock = 64;

}  // namespace

absl::StatusOr<uint32_t> LocalCluster::RendezvousPort(const TrainingJob& /*job*/) {
  // A random block of free ports below the ephemeral range (base/free_port.h).
  absl::StatusOr<int> port = PickFreePortBlock(kRendezvousBlock);
  if (!port.ok()) return port.status();
  return static_cast<uint32_t>(*port);
}

absl::Status LocalCluster::KillMachine(const std::string& machine_id) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, pod] : pods_) {
    if (pod.machine_id != machine_id || pod.delete_deadline_ns != 0) continue;
    Refresh(pod);
    if (pod.exited) continue;
    SignalSession(pod.pid, SIGKILL);
    // A dead machine's memory is gone: so are the checkpoints its agent held.
    if (!options_.checkpoint_root.empty()) RemoveTree(CheckpointArea(options_.checkpoint_root, pod.job_key, pod.name));
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no live pod on machine ", machine_id));
}

pid_t LocalCluster::AgentPid(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() ? 0 : it->second.pid;
}

void LocalCluster::TearDown(int grace_ms) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, pod] : pods_) {
    Refresh(pod);
    if (!pod.exited) kill(pod.pid, SIGTERM);
  }
  const int64_t deadline = MonotonicNanos() + int64_t{grace_ms} * 1'000'000;
  while (true) {
    bool any = false;
    for (auto& [name, pod] : pods_) {
      Refresh(pod);
      if (MonotonicNanos() >= deadline) SignalSession(pod.pid, SIGKILL);
      any |= !pod.exited || !ProcessesInSession(pod.pid).empty();
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const auto& [name, pod] : pods_) ::unlink(PidFilePath(options_.state_dir, name).c_str());
  pods_.clear();
  SavePodTable().IgnoreError();  // the table is empty; a failure leaves dead pids that Refresh drops
  if (!options_.checkpoint_root.empty()) RemoveTree(options_.checkpoint_root);
}

}  // namespace peregrine
