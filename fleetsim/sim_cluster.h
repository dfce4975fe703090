// SimCluster: the simulated machines, pods and agents around the real decision core. It
// keeps the JobObservation the controller would build (pods as the cluster shows them,
// agents as the registry shows them) and applies a JobPlan the way the executor does:
// pods are scheduled on free machines and become ready after CostModel::pod_start_s,
// agents converge to their DesiredAgent (a command or the registration's ack) after
// restart_s (standby_swap_s for an activated standby) plus the checkpoint restore, other
// commands are answered after a short round trip (a diagnostic after its share of
// diagnosis_s), evicted machines are quarantined and return after repair
// (FaultEvent::end_ns) plus machine_return_s.
//
// Faults: a fail-stop of kind gpu/memory/nic/host breaks its machine over
// [start_ns, end_ns); the pod on it fails and its agent disconnects after
// failstop_detection_s. A software fault crashes the training process of an active pod
// (its agent reports an exit after failstop_detection_s); the machine stays healthy. A
// fail-slow slows the machine by its severity while it lasts (compute: one of its GPUs;
// link: its network links).
//
// Fail-slow signals (failslow_signals.h), as the real agents send them: once the job's
// iteration time has changed by at least the spec's verifyThreshold for the tracking
// latency (TrackSlowdown), every active agent reports the verified slowdown (or its end)
// on its first rank; while the core has an agent's NCCL profiling on (set_nccl_mode), the
// agent reports its ranks' comm profiles, synthesised from the layout and the slots'
// fail-slow state, rebuilt only when that state or the profiling agents change; a trap
// (set_nccl_mode with trap) pauses training (Paused) until released; the validation's
// gemm and p2p_rounds diagnostics are answered from the fault list (an oracle). While
// profiling is on, an agent also reports its ranks' iteration summaries (step, iteration
// time, micro-batches of its replica): what S2 measures. A set_microbatch_plan changes
// the replicas' micro-batches when it is answered (the trainer follows it; the plan's
// from_step, a few steps ahead, is not waited for) and so the job's step time
// (ReplicaStepFactors); an empty plan, or a new attempt, restores the even split.
//
// The engine (sim_engine.h) owns time, the training progress and the decision calls; the
// cluster schedules its own future events on the EventQueue it is given. Machines are named
// "m<index>". Single-threaded; thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_CLUSTER_H_
#define PEREGRINE_FLEETSIM_SIM_CLUSTER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/core/job_state.h"
#include "fleetsim/cost_model.h"
#include "diagnosis/parallel_layout.h"
#include "fleetsim/failslow_signals.h"
#include "fleetsim/fault_model.h"
#include "fleetsim/sim_event.h"

namespace peregrine::fleetsim {

struct SimClusterOptions {
  int job_machines = 0;
  int fleet_machines = 0;  // job machines + spares: where standbys and replacements go
  int gpus_per_machine = 8;
  CostModel costs;
  // The restore of a new attempt reads the in-memory checkpoint (memory_restore_s) or
  // the disk one (disk_restore_s).
  bool restore_from_memory = true;
  // Steps between the checkpoints the agents report (the spec's intervalSteps).
  uint32_t checkpoint_interval_steps = 0;
  bool backed_up = true;  // reported steps are also backed up to peers (backupCopies > 0)
  // The job's parallelism (tensor x pipeline x data = job_machines x gpus_per_machine)
  // and healthy step time, for the fail-slow signals; an invalid layout sends none.
  int tensor = 0;
  int pipeline = 0;
  int data = 0;
  double step_time_s = 10;
  double verify_threshold = 0.10;  // the spec's failSlow.verifyThreshold
  FailSlowSignalOptions signals;
};

// What applying one plan did, for the engine's counts.
struct ApplyResult {
  int pods_created = 0;
  int pods_deleted = 0;
  int quarantined = 0;
};

class SimCluster {
 public:
  // `faults` and `queue` must outlive the cluster. Fault start events are queued here.
  SimCluster(const SimClusterOptions& options, const std::vector<FaultEvent>& faults, EventQueue* queue);

  // Handles one of the cluster's events at `now` (its time).
  void OnEvent(const SimEvent& event, int64_t now);
  // Whether the observation changed since the last Observe (a decision is due).
  bool changed() const { return changed_; }
  void MarkChanged() { changed_ = true; }

  // The observation at `now`: connected agents heartbeat; the agents running `attempt`
  // report `step` as their ranks' last completed step and the checkpoints up to it.
  const JobObservation& Observe(int64_t now, uint64_t attempt, uint64_t step, double iteration_s);

  // Applies `plan` at `now` as the executor does; marks the evictions it quarantined in
  // plan->status. Keeps plan->desired_agents (moved from).
  ApplyResult Apply(JobPlan* plan, int64_t now);

  // Every slot of `status` runs `status.attempt` on a working machine: the job can train.
  bool SlotsReady(const JobStatus& status, int64_t now) const;
  // Some slot's pod waits for a free machine.
  bool SlotWaitingForMachine(const JobStatus& status) const;
  // The job's step-time growth from the fail-slows on its slots' machines (the largest).
  double SlotSlowdown(const JobStatus& status) const;
  // The agents' tracking of the job's iteration time: `slowdown` is the job's step-time
  // growth now (while `training`). A change verified for the tracking latency is reported
  // by every active agent of `attempt` (a decision is due); a wake-up is queued for it.
  void TrackSlowdown(double slowdown, uint64_t attempt, bool training, int64_t now);
  // A validation holds NCCL trapped on some agent: training is paused.
  bool Paused() const { return trapped_ > 0; }
  // The machine (by id) has a fail-stop or fail-slow fault in force at `now`.
  bool MachineFaulty(const std::string& machine_id, int64_t now) const;
  int FreeMachines() const { return static_cast<int>(free_.size()); }
  // Machines holding a pod of the job (active or standby, starting or running).
  int MachinesHeld() const { return held_; }

  int64_t faults_hitting_job() const { return faults_hit_; }
  int64_t fail_stops_hitting_job() const { return fail_stops_hit_; }
  int64_t fail_slows_hitting_job() const { return fail_slows_hit_; }

 private:
  struct Machine {
    int64_t broken_until = 0;   // a fail-stop in force until then
    bool quarantined = false;
    int64_t pod_uid = -1;       // -1: no pod
    struct Slow {
      FaultKind kind = FaultKind::kSlowCompute;
      double severity = 0;
      int gpu = 0;  // compute: the slow GPU's local rank
    };
    std::vector<Slow> slow;     // the fail-slows in force
  };
  struct PodMeta {
    int64_t uid = 0;
    int machine = -1;  // -1: waiting for a machine
  };
  struct AgentMeta {
    int64_t uid = 0;
    int first_rank = -1;          // the ranks it runs: [first_rank, first_rank + gpus)
    uint64_t target_attempt = 0;  // converging to it while `converging`
    bool converging = false;
    std::string converge_id;      // the command id (empty: the registration's ack)
    bool crashed = false;         // its training process crashed (software fault)
    bool trapped = false;         // NCCL trapped by a validation (set_nccl_mode trap)
    // Its command results' ids in arrival order: the oldest is dropped past the bound, as
    // the controller's agent registry does.
    std::deque<std::string> result_order;
  };
  // What the agents have reported of the job's iteration time (TrackSlowdown).
  struct Tracker {
    uint64_t attempt = 0;
    double reported = 0;    // the verified slowdown the agents report (0: healthy)
    double pending = -1;    // a change seen, not yet verified (-1: none)
    int64_t pending_since = 0;
    int64_t onset = 0;      // the reported slowdown's onset (sim ns)
  };
  struct Command {
    int64_t uid = 0;
    CommandToSend command;
  };

  PodObservation* PodByUid(int64_t uid, size_t* index = nullptr);
  AgentObservation* AgentByPod(const std::string& pod, size_t* index = nullptr);
  void AddPod(const PodToCreate& create, int64_t now);
  void DeletePod(const std::string& name, int64_t now);
  void Schedule(size_t pod_index, int machine, int64_t now);
  void ScheduleWaiting(int64_t now);
  void MaybeFree(int machine, int64_t now);
  void Register(int64_t uid, int64_t now);
  void Converge(size_t agent_index, const AssignmentSpec& assignment, const std::string& command_id, bool activate,
                int64_t now);
  void RunCommand(const CommandToSend& command, int64_t now);
  void FinishCommand(size_t agent_index, const std::string& id, bool ok, const std::string& message,
                     int64_t now);
  void Quarantine(const std::string& machine_id, int64_t now);
  double RestoreSeconds(const AssignmentSpec& assignment) const;
  SlotSlowState MachineSlowState(int machine) const;
  // The fail-slow state of every slot of the agents running `attempt` (by slot).
  std::vector<SlotSlowState> SlotStates(uint64_t attempt) const;
  void UpdateProfiles(uint64_t attempt);
  void ReportSlowdown(int64_t now);
  const std::vector<SlotSlowState>& CachedSlotStates(uint64_t attempt);
  void FailSlowStateChanged();
  void SetTrapped(size_t agent_index, bool trapped);
  static int MachineIndex(const std::string& machine_id);

  SimClusterOptions options_;
  const std::vector<FaultEvent>& faults_;
  EventQueue* queue_;
  std::vector<Machine> machines_;
  std::set<int> free_;
  std::set<int> slow_machines_;
  JobObservation obs_;
  std::vector<PodMeta> pod_meta_;      // parallel to obs_.pods
  std::vector<AgentMeta> agent_meta_;  // parallel to obs_.agents
  std::unordered_map<std::string, size_t> pod_by_name_;
  std::unordered_map<int64_t, size_t> pod_by_uid_;
  std::unordered_map<std::string, size_t> agent_by_pod_;
  std::deque<int64_t> waiting_;  // pods waiting for a machine, oldest first
  std::map<std::string, DesiredAgent> desired_;
  std::map<int64_t, Command> commands_;  // in flight, by table index
  int held_ = 0;
  int64_t next_uid_ = 1;
  int64_t next_command_ = 0;
  bool changed_ = true;
  std::optional<ParallelLayout> layout_;
  Tracker tracker_;
  bool profiles_dirty_ = true;
  std::vector<SlotSlowState> slot_states_;  // CachedSlotStates
  std::vector<uint32_t> micro_batches_;     // per replica under a plan; empty: even split
  uint64_t plan_attempt_ = 0;
  uint64_t slot_states_attempt_ = 0;
  bool slot_states_valid_ = false;
  int trapped_ = 0;
  LinkRoundsCache link_rounds_;
  int64_t faults_hit_ = 0, fail_stops_hit_ = 0, fail_slows_hit_ = 0;
};

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_CLUSTER_H_
