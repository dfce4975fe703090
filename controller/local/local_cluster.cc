#include "controller/local/local_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
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
    for (const auto& p : j.at("pods")) {
      LocalPod pod;
      pod.name = p.at("name");
      pod.job_key = p.at("job");
      pod.machine_id = p.at("machineId");
      pod.pid = p.at("pid");
      pod.start_ticks = p.at("startTicks");
      pod.exited = p.value("exited", false);
      pod.exit_reason = p.value("exitReason", "");
      pod.own_child = false;
      pods_[pod.name] = pod;
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": not a pod table: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::SavePodTable() {
  nlohmann::json pods = nlohmann::json::array();
  for (const auto& [name, p] : pods_) {
    pods.push_back({{"name", p.name}, {"job", p.job_key}, {"machineId", p.machine_id}, {"pid", p.pid},
                    {"startTicks", p.start_ticks}, {"exited", p.exited}, {"exitReason", p.exit_reason}});
  }
  nlohmann::json j = {{"nextMachine", next_machine_}, {"quarantined", quarantined_}, {"pods", pods}};
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
  pod.machine_id = absl::StrCat(next_machine_++);

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
  if (!options_.token_file.empty()) {
    args.push_back("--token-file");
    args.push_back(options_.token_file);
  }
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
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setsid();
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
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
  absl::MutexLock lock(&mu_);
  if (std::find(quarantined_.begin(), quarantined_.end(), machine_id) == quarantined_.end()) {
    quarantined_.push_back(machine_id);
  }
  return SavePodTable();
}

std::vector<std::string> LocalCluster::QuarantinedMachines() const {
  absl::MutexLock lock(&mu_);
  return quarantined_;
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
  pods_.clear();
  SavePodTable().IgnoreError();  // the table is empty; a failure leaves dead pids that Refresh drops
  if (!options_.checkpoint_root.empty()) RemoveTree(options_.checkpoint_root);
}

}  // namespace peregrine
