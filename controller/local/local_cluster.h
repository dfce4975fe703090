// LocalCluster: the embedded local cluster. A "pod" is a process session (setsid) running
// peregrine-agent, which runs the training command; a "machine" is a numeric id (the
// stand-in cluster's PEREGRINE_MACHINE_ID) handed out once and never reused.
//
// Pods outlive the controller: they are started in their own session with output to
// <state_dir>/logs/<pod>.log, and the pod table is persisted in <state_dir>/pods.json, so
// a restarted controller re-adopts running pods (pid plus start time, safe against pid
// reuse) and never kills training. Creation is crash-consistent: the pod is saved as
// "starting" before its process exists, the child writes its pid and start time into the
// locked <state_dir>/pods/<pod>.pid before exec, then the pid is saved; a controller killed
// in between adopts that process on restart, or drops the entry if none was started, so a
// pod never gets a second process. Deleting a pod sends SIGTERM to its agent and SIGKILL
// to whatever of its session remains after the grace period. Job status is persisted in
// <state_dir>/status-<namespace>-<name>.json (atomic rename); events are appended to
// <state_dir>/events.log.
//
// Not thread-safe: the job controller calls it from one loop; KillMachineForTest and the
// fault injection entry points take the same internal lock, so they may come from the
// HTTP thread.
#ifndef PEREGRINE_CONTROLLER_LOCAL_LOCAL_CLUSTER_H_
#define PEREGRINE_CONTROLLER_LOCAL_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "controller/cluster.h"

namespace peregrine {

class LocalNodeHealth;

struct LocalClusterOptions {
  std::string state_dir;           // created if missing
  std::string agent_binary;        // path of peregrine-agent
  std::string controller_address;  // host:port the agents dial
  // The controller's agent key: each pod's agent gets its credential
  // (controller/agent_credentials.h) in a 0400 file <state_dir>/credentials/<pod>, which it
  // reads and removes at start. Empty: no credential.
  std::string agent_key;
  std::vector<std::string> path_prepend;       // directories put first on PATH (sim-trainer)
  std::map<std::string, std::string> pod_env;  // extra environment for every pod
  int heartbeat_ms = 500;
  // The agents' in-memory checkpoint stores (shared memory): each pod's agent keeps its
  // area under <checkpoint_root>/<namespace>.<job>/<pod>. A killed machine loses its area
  // (its memory is gone), a deleted pod's area is removed once the pod is reaped, and
  // TearDown removes the whole root. Empty: no stores.
  std::string checkpoint_root;
  // Tests only: called in CreatePod once the pod's process is started and before its pid
  // is saved (a crash test kills the controller there). Empty in production.
  std::function<void(const std::string& pod)> launched_hook_for_test;
};

class LocalCluster final : public Cluster {
 public:
  // Creates the state directory and loads an existing pod table (re-adopting live pods).
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Create(LocalClusterOptions options);
  ~LocalCluster() override;

  absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) override;
  absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) override;
  absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) override;
  absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) override;
  absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) override;
  absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) override;
  absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) override;
  std::string RendezvousDomain(const TrainingJob& /*job*/) override { return ""; }
  // A random base port P below the kernel's ephemeral range such that 127.0.0.1:P..P+63
  // were all free when checked (training's store uses P, diagnosis and validation P+1..);
  // a kernel-picked free port when no such block is found.
  absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) override;

  // Fault injection: kills every process of the pod that holds `machine_id` (the machine
  // dies, and with it the checkpoints in its memory). kNotFound when no live pod runs there.
  absl::Status KillMachine(const std::string& machine_id);
  // The pid of the pod's agent, 0 if unknown.
  pid_t AgentPid(const std::string& pod) const;
  std::vector<std::string> QuarantinedMachines() const;
  // Node health (local_node_health.h): QuarantineMachine hands each machine to it too (it
  // must outlive the cluster; null: machines stay quarantined).
  void SetNodeHealth(LocalNodeHealth* node_health) { node_health_ = node_health; }
  // The machine passed its sweep: it leaves the quarantine list and the next pod created
  // runs on it (free machines are used before new ids). Persisted in pods.json.
  absl::Status ReturnMachine(const std::string& machine_id);
  std::vector<std::string> FreeMachines() const;
  // Stops every pod now (SIGTERM, then SIGKILL after grace_ms) and waits for them.
  void TearDown(int grace_ms);
  const std::string& state_dir() const { return options_.state_dir; }

 private:
  // Writes the pod's credential file (LocalClusterOptions::agent_key); its path.
  absl::StatusOr<std::string> WriteCredentialFile(const TrainingJob& job, const std::string& pod);
  struct LocalPod {
    std::string name;
    std::string job_key;
    std::string machine_id;
    pid_t pid = 0;
    unsigned long long start_ticks = 0;  // /proc/<pid>/stat starttime: pid-reuse guard
    bool own_child = false;              // started by this process (waitpid works)
    bool starting = false;               // saved before its process exists (CreatePod)
    bool exited = false;
    std::string exit_reason;
    int64_t delete_deadline_ns = 0;      // >0 while being deleted
  };
  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}
  absl::Status LoadPodTable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SavePodTable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Refresh(LocalPod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapDeleted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LocalClusterOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, LocalPod> pods_ ABSL_GUARDED_BY(mu_);
  int next_machine_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> quarantined_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> free_machines_ ABSL_GUARDED_BY(mu_);  // returned by node health
  LocalNodeHealth* node_health_ = nullptr;
};

// Process-session helpers shared with tests: every pid whose session id is `sid`.
std::vector<pid_t> ProcessesInSession(pid_t sid);
// Sends `sig` to every process of the session; returns how many were signalled.
int SignalSession(pid_t sid, int sig);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_LOCAL_CLUSTER_H_
