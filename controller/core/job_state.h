// The decision engine's vocabulary: what the controller persists about a job (JobStatus),
// what it observes each round (JobObservation) and what it decides to do (JobPlan).
//
// Plain data, no I/O. JobStatus is everything needed to resume after a controller
// restart (everything needed to resume lives in the TrainingJob status):
// it is written to the TrainingJob status subresource (Kubernetes) or the state file
// (local mode) after every round that changed it. Times are Unix nanoseconds.
#ifndef PEREGRINE_CONTROLLER_CORE_JOB_STATE_H_
#define PEREGRINE_CONTROLLER_CORE_JOB_STATE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/core/job_spec.h"
#include "controller/core/job_state_names.h"
#include "diagnosis/stack_parse.h"

namespace peregrine {

// kSuspended: spec.suspend or an admission hold (a queue has not admitted the job): no
// pods, waiting (decide_suspend.cc).
enum class JobPhase { kPending, kRunning, kRecovering, kSucceeded, kFailed, kSuspended };
const char* JobPhaseName(JobPhase phase);  // "Pending", "Running", ..., "Suspended"

// Kubernetes condition conventions: lastTransitionTime moves only when status flips.
struct Condition {
  std::string type;    // Valid, Ready, Progressing, StandbyReady, Degraded
  ConditionStatus status = ConditionStatus::kUnknown;
  std::string reason;  // CamelCase
  std::string message;
  int64_t observed_generation = 0;
  int64_t last_transition_time = 0;
};

// A machine slot of the job: slot i holds ranks [i*gpus, (i+1)*gpus).
struct SlotStatus {
  int index = 0;
  std::string pod;         // the pod holding the slot now
  std::string machine_id;  // where that pod runs ("" until observed)
  bool observed = false;   // the pod has been seen running at least once
  // The pod's node has reported Ready=False/Unknown since this time (0: it has not) while
  // the agent vouched for the machine (pod_health.h JudgeNodeUnready); the most advanced
  // step its ranks had completed, and when that last advanced.
  int64_t node_unready_since = 0;
  uint64_t node_unready_step = 0;
  int64_t node_unready_progress_at = 0;
};

struct StandbyStatus {
  std::string pod;
  std::string machine_id;
  bool observed = false;
  int64_t node_unready_since = 0;  // as SlotStatus::node_unready_since (no progress: it does not train)
};

// One stage of a stop-time diagnosis (stop_time_diagnosis.h) as recorded in its incident.
struct DiagnosisStageRecord {
  StopTimeStage stage = StopTimeStage::kStop;
  int64_t started_at = 0;
  int64_t finished_at = 0;  // 0 while running
  StageVerdict verdict = StageVerdict::kPending;  // kPending while running
  std::vector<std::string> failed_machines;  // machine ids
  std::vector<std::string> results;          // one line per machine / pair / group, with figures
  std::string note;                          // why no verdict, the digest majority, ...
};

// One incident: a failure signal, what was decided and what it cost.
struct Incident {
  uint64_t id = 0;
  IncidentKind kind = IncidentKind::kProcessCrash;
  std::string signal;  // human-readable evidence
  int64_t detected_at = 0;
  int64_t decided_at = 0;   // 0 while triaging
  int64_t resumed_at = 0;   // the first step after the restart completed; 0 while recovering
  std::vector<std::string> machines;  // machine ids acted on
  // How many more machines it acted on than `machines` names: the stored status names the
  // first ones only (status_json.h); set when read back from it, 0 in the decision core.
  uint64_t machines_not_named = 0;
  std::string decision;               // evict+standby, reattempt, ...
  std::vector<std::string> actions;
  uint64_t step_at_failure = 0;  // most advanced completed step seen before the failure
  uint64_t resume_step = 0;      // the step training resumed after
  // step_at_failure - resume_step: steps trained again after the restart (their time is
  // counted as lost). 0 without checkpoints, where training resumes after the last step.
  uint64_t steps_redone = 0;
  double training_time_lost_seconds = 0;
  std::vector<DiagnosisStageRecord> diagnosis;  // the stop-time diagnosis it ran, in order
};

// A stop-time diagnosis in progress (stop_time_diagnosis.h): persisted so a restarted
// controller resumes it at the same stage and round (command ids are deterministic, agents
// answer a known id with the stored result).
struct StopTimeDiagnosis {
  uint64_t incident_id = 0;
  bool numeric = false;     // NaN / loss spike: the alignment stage runs first
  StopTimeStage stage = StopTimeStage::kStop;  // the current stage
  int round = 0;            // the round inside it (all_gather pair rounds, replay phases)
  int64_t stage_started_at = 0;  // when the current round's commands went out
  uint32_t port_base = 0;   // rendezvous ports: port_base + 1 + pair / group index
  // Outcomes of the finished rounds of a multi-round stage: all_gather "<edge>" ->
  // passed | failed | excluded; replay "<round>/<group>" -> digest | failed | unavailable.
  std::map<std::string, std::string> outcomes;
};

struct Eviction {
  std::string machine_id;
  std::string pod;
  std::string reason;
  int64_t at = 0;
  // The machine was handed to node health management (cordoned and labelled). Until then
  // every round's plan asks for it (JobPlan::quarantine), across controller restarts.
  bool quarantined = false;
  // The machine is to blame (its pod failed or vanished on it, its inspections, its node
  // unreachable past the grace, a diagnosis verdict). False when the pod was lost for a
  // reason that is not the machine's (OOMKilled, evicted for memory pressure, preempted,
  // deleted by someone else): the pod is replaced, the machine is never quarantined.
  bool machine_fault = true;
  uint64_t incident_id = 0;  // the incident that evicted it; 0: none (a failed standby)
};

// A machine to hand to node health management, and why.
struct QuarantineRequest {
  std::string machine_id;
  std::string reason;
  uint64_t incident_id = 0;  // the incident behind it; 0: none (a failed standby)
};

// A node Peregrine cordoned (quarantined), as the status records it so node health
// management can undo it: the node, why, when and for which incident, and whether the
// node was schedulable until Peregrine cordoned it. A node someone else had cordoned
// first is recorded with by_peregrine false and must never be uncordoned by Peregrine.
struct CordonRecord {
  std::string node;
  std::string reason;
  int64_t at = 0;
  uint64_t incident_id = 0;  // 0: no incident (a failed standby's machine)
  bool by_peregrine = true;
};

struct VersionRecord {
  CodeVersionSpec code;
  int64_t applied_at = 0;
  std::string reason;
  VersionOutcome outcome = VersionOutcome::kRunning;
  uint64_t applied_at_step = 0;  // the step training resumed after when it was applied
};

// A network alarm (NIC flap, link down, RDMA errors) counted towards eviction.
struct NetworkAlarmRecord {
  std::string machine_id;
  int64_t at = 0;
  std::string summary;
};

// A fail-slow of the job (Falcon-Detect): detected from the ranks' verified iteration-time
// changes, localized by comparing the communication groups' profiles, ended when the
// ranks' iteration time came back.
// Validation while paused (Falcon section 4.3; controller/failslow_validation.h): NCCL
// trapped on every agent, GEMM on the suspects' machines, the O(1) link rounds over the
// ring links of the suspect groups' kinds, then NCCL released.
struct FailSlowValidation {
  ValidationState state = ValidationState::kNotStarted;
  int pass = 0;                       // Gemm / Links: which pass of the measurement (from 1)
  ValidationVerdict verdict = ValidationVerdict::kNone;  // set once judged
  int64_t started_at = 0;
  int64_t phase_started_at = 0;       // when the current state began (timeouts)
  int64_t ended_at = 0;               // training released (Done)
  std::vector<std::string> machines;  // machines whose GPUs ran GEMM
  std::string link_kinds;             // group kinds whose ring links were measured ("dp,pp")
  std::string master_addr;            // the link rounds' rendezvous (the current pass's port)
  uint32_t master_port = 0;
  std::vector<int> slow_gpus;         // global ranks whose GEMM is slower than their peers
  std::vector<std::string> slow_links;  // "dp 0->2": kind, sender and receiver global ranks
  std::string detail;                 // the figures behind the verdict, or why it failed
};

// The mitigation ladder's state for one finding (failslow_mitigation.h): the current
// strategy, the loss accumulated on it (ski-rental), what was reported, and the
// replacement asked for. Persisted so a restarted controller continues where it was.
// S2's micro-batch plan for a finding (controller/core/microbatch_mitigation.h): what was
// sent to every active agent (SetMicroBatchPlan), the measured speeds it was solved for,
// and when it was withdrawn. One plan at a time per job: the newest finding's.
struct MicroBatchPlanRecord {
  uint64_t plan_id = 0;   // the plan in force (or last in force); 0: none was sent
  uint64_t attempt = 0;   // the attempt whose agents got it
  uint64_t from_step = 0;
  std::vector<int64_t> counts;  // micro-batches per DP replica, DP index order
  double gradient_scale = 0;    // n/M
  int64_t global_micro_batches = 0;  // M
  std::vector<double> seconds_per_micro_batch;  // the measured speeds it was solved for
  double predicted_step_seconds = 0;  // the solver's makespan for the plan
  double previous_step_seconds = 0;   // the makespan of the counts it replaced, same speeds
  int64_t decided_at = 0;
  int64_t in_force_at = 0;   // first seen run by every rank (each reports its count)
  int plans = 0;             // plans sent for this finding (re-plans included)
  int64_t cleared_at = 0;    // withdrawn (empty plan sent) or superseded; 0 while in force
  std::string cleared_reason;
  std::string failed;        // a pod refused the plan (its error): no further plan for the finding
  std::string reported;      // the last waiting/keeping reason reported (each once)
};

struct FailSlowMitigationRecord {
  MitigationStrategy strategy = MitigationStrategy::kIgnore;
  int64_t strategy_started_at = 0;  // 0: the ladder has not seen the finding yet
  int64_t accounted_until = 0;      // the loss is integrated up to here
  double loss_rate = 0;             // the wasted fraction of wall time in force since accounted_until
  double loss_seconds = 0;          // loss accumulated on the current strategy
  // Strategies reported unavailable for this finding ("redistribute", "remap"): each once.
  std::vector<MitigationStrategy> reported_unavailable;
  std::string blocker;        // why it does not escalate now, as last reported ("" none)
  double cost_seconds = 0;    // the next strategy's one-time cost at the last decision
  std::string cost_source;    // which measurement gave it
  int64_t break_even_at = 0;  // when the loss reached the cost (MonitorOnly: reported, not acted on)
  // S4: the machines to evict (asked of the decision engine) and the incident that does.
  std::vector<std::string> replace_machines;
  uint64_t incident_id = 0;
  int64_t stopped_at = 0;  // the finding ended: the ladder stopped
  std::string detail;      // the figures behind the last decision
  MicroBatchPlanRecord microbatch_plan;  // S2
};

struct FailSlowFinding {
  uint64_t id = 0;
  FailSlowState state = FailSlowState::kProfiling;
  FailSlowKind kind = FailSlowKind::kUnlocalized;
  std::vector<int> ranks;       // the slow rank(s) (compute, compute+communication) or the slow groups' ranks
  std::string group;            // "dp 1", "pp 0", "tp 3" (communication); "" for compute
  std::vector<std::string> machines;  // machine ids of the slow ranks and groups
  double severity = 0;          // iteration time / healthy - 1 (largest reported)
  FailSlowTier tier = FailSlowTier::kMonitor;  // GUARD: monitor (< mitigate), mitigate, replace (>= replace)
  double healthy_iteration_seconds = 0;
  double slow_iteration_seconds = 0;
  int64_t onset = 0;            // first slow iteration (earliest over the ranks)
  int64_t detected_at = 0;      // when the controller saw the first verified slowdown
  int64_t localized_at = 0;
  int64_t ended_at = 0;         // 0 while ongoing
  std::string detail;           // the numbers behind the verdict
  FailSlowValidation validation;
  FailSlowMitigationRecord mitigation;
};

// The loss monitor's running reference (loss_monitor.h): recent per-step medians over the
// ranks, newest last, and the last step folded in.
struct LossReference {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  uint64_t step = 0;
};

// Stack aggregation (ByteRobust section 5.1; controller/hang_policy.h): a hang or an MFU
// drop is investigated by capturing the stacks of every training-related process of every
// active pod, in one round (hang) or several rounds 10 s apart (MFU drop).
struct StackRound {
  int64_t started_at = 0;
  int64_t finished_at = 0;              // 0 while the captures are outstanding
  std::vector<std::string> groups;      // "ranks 2,3,6,7 (healthy): <innermost frames>", largest first
  std::vector<int> suspect_ranks;       // ranks outside the dominant group, ascending
  std::vector<int> unanswered_slots;    // slots whose capture failed or missed the deadline
  std::string flagged_kind;             // MFU rounds: "tp", "pp", "dp" of the flagged group; "" none
  int flagged_index = -1;
  std::string explanation;
};

struct StackInvestigation {
  uint64_t id = 0;
  InvestigationKind kind = InvestigationKind::kHang;
  InvestigationState state = InvestigationState::kCapturing;
  uint64_t attempt = 0;
  uint64_t incident_id = 0;  // the incident that carries it (0 until opened)
  std::string signal;        // what triggered it
  int64_t started_at = 0;
  int64_t ended_at = 0;
  int rounds_planned = 1;
  int64_t next_round_at = 0;  // MFU: when the next round's captures are sent
  std::vector<StackRound> rounds;
  std::string chosen_group;           // "pp 0"; "" when the machines' union was chosen or none
  std::vector<int> slots;             // slots (layout machines) to evict, ascending
  std::vector<std::string> machines;  // their machine ids when decided
  std::string explanation;
};

struct StackDiagnosisStatus {
  // Progress watch: when the slowest rank last completed a step (hang detection).
  uint64_t progress_attempt = 0;
  uint64_t progress_step = 0;
  int64_t progress_at = 0;
  // MFU watch for progress_attempt: the healthy iteration time (EWMA) and since when
  // the iteration time has stayed above the drop factor (0: it has not).
  double healthy_iteration_seconds = 0;
  int64_t degraded_since = 0;
  uint64_t next_id = 1;
  std::vector<StackInvestigation> investigations;  // bounded, newest last
};

// In-memory checkpoints (spec.checkpoint; controller/core/checkpoint_policy.h).
struct CheckpointSlotPlacement {
  int slot = 0;
  std::vector<int> holders;  // the slots holding copies of this slot's shards, in copy order
  bool operator==(const CheckpointSlotPlacement&) const = default;
};

// A checkpoint store event an agent reported, as kept in the status (bounded).
struct CheckpointEventRecord {
  int64_t at = 0;
  std::string pod;
  CheckpointEventKind kind = CheckpointEventKind::kSkipped;
  uint64_t step = 0;
  int global_rank = -1;  // -1: the whole slot
  std::string detail;
};

struct CheckpointStatus {
  // The newest step every slot has stored and backed up (stored only, with backupCopies
  // 0): every restart resumes after it. 0: none yet.
  uint64_t last_complete_step = 0;
  uint64_t last_persisted_step = 0;  // the newest step every slot wrote to persistPath; 0: none
  std::vector<CheckpointSlotPlacement> placement;  // by slot
  std::string degraded_reason;  // why the placement shares parallel groups; "" when it does not
  // Steps whose restore failed: never chosen again as a resume step (bounded, newest last).
  std::vector<uint64_t> failed_steps;
  std::vector<CheckpointEventRecord> events;  // bounded, newest last
  // Per pod: the time of the newest checkpoint event already turned into a job event.
  std::map<std::string, int64_t> events_seen;
};

// A suspension of the job (spec.suspend, or a hold of the cluster's admission such as
// Kueue's: decide_suspend.cc), from the request until it is lifted.
struct SuspensionStatus {
  std::string reason;   // CamelCase: SuspendedBySpec, or the hold's (WorkloadNotAdmitted, ...)
  std::string message;  // what holds it and where training resumes from
  int64_t requested_at = 0;
  // status.checkpoint.lastPersistedStep when it was requested: the pods stay until a newer
  // step is persisted (or the save times out), when the job persists checkpoints.
  uint64_t persisted_before = 0;
  int64_t suspended_at = 0;  // the pods were deleted; 0 while the checkpoint is being saved
};

struct JobStatus {
  JobPhase phase = JobPhase::kPending;
  std::vector<Condition> conditions;
  int64_t observed_generation = 0;
  // The current attempt: every job-wide (re)start increments it; agents converge to it.
  uint64_t attempt = 0;
  uint64_t resume_step = 0;
  int64_t attempt_started_at = 0;
  // Attempt 1's start-up as measured: from its start to the first step every reporting
  // rank completed (seconds; 0 until then). The restart cost before any incident
  // (failslow_mitigation.h MeasureRestartCost).
  double first_step_seconds = 0;
  std::string master_addr;
  uint32_t master_port = 0;
  CodeVersionSpec code;
  std::vector<VersionRecord> version_history;  // bounded
  std::vector<SlotStatus> slots;
  std::vector<StandbyStatus> standbys;
  int standby_desired = 0;
  int standby_ready = 0;
  uint64_t last_completed_step = 0;  // min over ranks of the current attempt
  uint64_t max_completed_step = 0;   // max over ranks (progress not yet common to all)
  double mean_iteration_seconds = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;
  double training_time_lost_seconds = 0;
  double ettr = 1.0;  // effective training time ratio
  std::vector<Incident> incidents;  // bounded, newest last
  std::vector<Eviction> evicted;    // bounded, newest last
  uint64_t next_incident_id = 1;
  uint64_t next_pod_serial = 0;
  int recoveries = 0;
  int reattempts = 0;  // consecutive reattempts without progress past the failure step
  int64_t triage_deadline = 0;  // >0 while an incident gathers corroborating signals
  std::vector<FailSlowFinding> fail_slows;  // bounded, newest last
  uint64_t next_fail_slow_id = 1;
  std::vector<NetworkAlarmRecord> network_alarms;  // bounded, newest last
  // A non-urgent hot update waiting for the next failure-triggered restart or its window.
  std::optional<CodeVersionSpec> pending_code;
  int64_t pending_code_since = 0;
  LossReference loss_reference;
  std::optional<StopTimeDiagnosis> diagnosis;  // set while training is stopped for diagnosis
  int rollbacks = 0;  // rollbacks after failed reattempts without passing the failure step
  StackDiagnosisStatus stack_diagnosis;  // hang / MFU-drop investigations (hang_policy.h)
  CheckpointStatus checkpoint;           // in-memory checkpoints (spec.checkpoint.intervalSteps > 0)
  // Every cordon Peregrine made for this job (cordons.h RecordCordon): the newest
  // kMaxCordonRecords, oldest first, and how many older ones were dropped.
  std::vector<CordonRecord> cordons;
  uint64_t cordons_dropped = 0;
  std::optional<SuspensionStatus> suspension;  // set from the request until resumed
};

// ---------------------------------------------------------------------------
// Observations (filled by the edges: the Cluster and the agent registry)
// ---------------------------------------------------------------------------

struct InspectionObservation;

struct PodObservation {
  std::string name;
  std::string machine_id;
  bool running = false;  // the pod's processes are alive
  bool failed = false;   // the pod terminated or its machine is gone
  std::string reason;    // why it failed ("process group exited with signal 9", "node NotReady")
  // Why a pod that is neither running nor failed cannot start, as the cluster shows it
  // ("ImagePullBackOff: ...", "Unschedulable: ..."); empty while nothing is wrong.
  std::string waiting_reason;
  int64_t created_at = 0;  // when the cluster created the pod (Unix ns); 0 unknown
  // With `failed`: the pod was lost for a reason that is not its machine's (a container
  // OOMKilled, evicted by the kubelet for memory pressure, preempted, deleted by someone
  // other than Peregrine). It is replaced; its machine is not quarantined.
  bool not_machine_fault = false;
  // The pod's node reports Ready=False or Unknown (`reason` says which). Not a failure by
  // itself: the decision engine waits spec.faultTolerance.nodeUnreachableGraceSeconds
  // while the pod's agent heartbeats and makes progress (pod_health.h JudgeNodeUnready).
  bool node_unready = false;
  // The node inspector's findings on the pod's Node (controller/kube/node_findings.h, not
  // "False" conditions), attributed to the pod's agent by AttributeNodeFindings
  // (node_attribution.h). Empty without the node inspector, and in local mode.
  std::vector<InspectionObservation> node_findings;
  // The training container's image as the pod spec has it (spec.containers[0].image); ""
  // when the cluster has no images (local mode): never taken as a mismatch.
  std::string image;
};

enum class AgentTrainingPhase { kUnknown, kIdle, kRunning, kPaused, kStopping, kExited, kSucceeded };

struct RankExit {
  int global_rank = 0;
  int exit_code = 0;
  int signal = 0;
  std::vector<std::string> last_log_lines;
};

// One machine-inspection result as the agent reported it (agent/inspection): the latest
// per component (heartbeat) or an alarm (a threshold crossing).
struct InspectionObservation {
  // gpu, xid, network, rdma, host, ...: the agent's label, kept as sent (a newer agent may
  // report kinds this controller does not know; they are shown, never dropped).
  std::string kind;
  std::string component;  // gpu0, PCI:0000:3b:00, eth0, /data
  InspectionStatus status = InspectionStatus::kUnknown;
  std::string summary;
  bool machine_attributed = false;
  int64_t at = 0;
};

// Fail-slow state of one rank as its agent reported it (FailSlowEvent, level-based: the
// latest verified change wins).
struct RankFailSlowObservation {
  bool slow = false;
  int64_t onset = 0;       // first slow iteration of the current (or last) slowdown
  int64_t ended_at = 0;    // onset of the recovery, 0 while slow
  double severity = 0;     // slow level / healthy level - 1
  double before_seconds = 0;
  double after_seconds = 0;
  uint64_t iteration_index = 0;
};

// Profiling (CommProfile): one rank's recent collectives on one communicator.
struct CollectiveObservation {
  uint64_t sequence = 0;  // equal on every member: n-th collective, or n-th send/recv with `peer`
  std::string op;
  int64_t enter = 0;
  int64_t exit = 0;       // exit - enter: time spent in the operation (one host's clock)
  int peer = -1;          // send/recv: the peer's rank in the communicator
};
struct CommProfileObservation {
  uint64_t comm_id = 0;
  int global_rank = -1;
  int rank_in_comm = -1;
  int comm_size = 0;
  std::vector<CollectiveObservation> collectives;
};

// The plain form of peregrine.v1.DiagnosticResult (every field of the proto).
struct DiagnosticOutcome {
  std::string kind;  // as the agent reported it; results are matched by command id, not kind
  bool passed = false;
  std::string detail;
  std::map<std::string, double> figures;
  std::vector<int> failed_ranks;  // global ranks
  bool not_present = false;       // tool and stand-in absent: never a fault (passed is true)
  std::string digest;             // alignment / replay
  std::string machine_id;
  double seconds = 0;
};

// One process's captured stacks (peregrine.v1.ProcessStacks): parsed frames plus the
// tool's raw text.
struct CapturedProcessStack {
  ProcessStack stack;
  std::string raw;
};

// The result of one command as the agent reported it (peregrine.v1.CommandResult).
struct CommandResultObservation {
  std::string command_id;
  bool ok = false;
  int code = 0;              // absl::StatusCode numbering; 0 is OK
  std::string message;       // the error message (or a note on success)
  int64_t finished_at = 0;
  std::optional<DiagnosticOutcome> diagnostic;  // RunDiagnostic
  bool has_stacks = false;                      // CaptureStacks
  std::map<int, std::vector<CapturedProcessStack>> stacks;  // by global rank; -1: not a rank
};

// The latest loss and grad-norm one rank printed, with the step they belong to.
struct RankLossObservation {
  uint64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
};

// The agent's checkpoint store (peregrine.v1.CheckpointReport), the latest heartbeat's.
struct CheckpointReportObservation {
  std::vector<uint64_t> stored_steps;     // every local rank has a finished shard; ascending
  std::vector<uint64_t> backed_up_steps;  // ... and every backup holder acknowledged it
  std::vector<uint64_t> persisted_steps;  // ... and it was written to the persist directory
  uint64_t store_bytes = 0;
  uint64_t memory_budget_bytes = 0;
  std::vector<std::pair<int, uint64_t>> held;  // (slot, step) backups this agent holds
};

// A checkpoint store event (peregrine.v1.CheckpointEvent) with its time.
struct CheckpointEventObservation {
  int64_t at = 0;
  CheckpointEventKind kind = CheckpointEventKind::kSkipped;
  uint64_t step = 0;
  int global_rank = -1;
  std::string detail;
};

// A rank's latest iteration summary (IterationSummary) of the agent's attempt.
struct RankIterationObservation {
  uint64_t step = 0;                  // last completed step
  double mean_iteration_seconds = 0;  // over the steps of the latest heartbeat that had any
  uint32_t micro_batches = 0;         // mb= of its last step; 0: the trainer does not follow plans
};

struct AgentObservation {
  std::string pod;
  std::string machine_id;
  bool connected = false;
  bool registered_as_standby = false;
  bool self_check_passed = false;
  int64_t last_seen = 0;
  uint64_t attempt = 0;  // the attempt its training runs (or ran last)
  uint64_t acked_attempt = 0;  // the attempt its last RegisterAck carried (it converges to it alone)
  AgentTrainingPhase phase = AgentTrainingPhase::kUnknown;
  std::map<int, uint64_t> rank_steps;  // global rank -> last completed step (for `attempt`)
  double mean_iteration_seconds = 0;
  std::vector<RankExit> exits;  // exits of `attempt`'s processes
  std::vector<std::string> pending_command_ids;
  std::map<std::string, std::string> failed_commands;  // id -> error message
  std::map<int, RankFailSlowObservation> fail_slow;   // by global rank (for `attempt`)
  std::vector<CommProfileObservation> comm_profiles;  // the latest heartbeat's (profiling on)
  bool nccl_profiling = false;  // the agent acknowledged profiling on (set_nccl_mode)
  std::vector<InspectionObservation> inspections;  // latest non-OK result per component
  std::vector<InspectionObservation> alarms;       // bounded, newest last
  // Results of the commands sent to it, by command id (bounded: the newest 64).
  std::map<std::string, CommandResultObservation> command_results;
  std::map<int, RankLossObservation> rank_losses;  // by global rank (for `attempt`)
  std::map<int, RankIterationObservation> rank_iterations;  // by global rank (for `attempt`)
  std::string data_address;  // host:port of its checkpoint data channel (Register); "" none
  std::optional<CheckpointReportObservation> checkpoint;  // absent until a heartbeat carries one
  std::vector<CheckpointEventObservation> checkpoint_events;  // bounded, newest last
};

struct JobObservation {
  std::vector<PodObservation> pods;       // the job's pods as the cluster shows them
  std::vector<AgentObservation> agents;   // every agent that ever registered for the job
  // Rank 0's address is "<slot-0 pod>.<rendezvous_domain>" (Kubernetes headless Service),
  // or 127.0.0.1 when the domain is empty (local mode).
  std::string rendezvous_domain;
  uint32_t candidate_master_port = 0;     // a free port, used when a new attempt starts
  std::optional<uint64_t> injected_fault_at;  // local mode: when a fault was injected (timeline)
  // Why the cluster does not let the job run now although spec.suspend is false (Kueue has
  // not admitted its Workload, evicted it, or is not installed): the job is suspended as
  // with spec.suspend, with this reason and message. nullopt: nothing holds it.
  struct Hold {
    std::string reason;  // CamelCase
    std::string message;
  };
  std::optional<Hold> hold;
};

// ---------------------------------------------------------------------------
// Plan (applied by the executor; deciding again on the applied result returns no actions)
// ---------------------------------------------------------------------------

enum class PodRole { kActive, kStandby };

struct PodToCreate {
  std::string name;
  PodRole role = PodRole::kActive;
  int slot = -1;  // for active pods
  // The training container's image: the running code version's (status.code), for a
  // standby the image of a prepared image update (decide_images.cc); "" (a version
  // without an image) leaves the pod template's image.
  std::string image;
};

struct PodToDelete {
  std::string name;
  std::string reason;
};

// The plain form of peregrine.v1.CheckpointPlan. Peers are slots; the executor adds the
// data addresses their agents registered with.
struct CheckpointPlanSpec {
  uint32_t interval_steps = 0;  // 0: checkpoints off (nothing else is sent)
  uint32_t backup_copies = 0;
  std::vector<int> backup_to;     // slots holding this slot's copies, in copy order
  std::vector<int> hold_for;      // slots whose copies this slot holds
  uint64_t restore_step = 0;      // 0: fresh start
  std::vector<int> restore_from;  // the holders of this slot's copies
  uint64_t memory_limit_bytes = 0;
  uint64_t backup_bandwidth_bytes_per_second = 0;
  uint32_t persist_every_steps = 0;
  std::string persist_dir;
  uint64_t committed_step = 0;
};

// What an agent should run: the plain form of peregrine.v1.Assignment.
struct AssignmentSpec {
  int slot = -1;
  uint64_t attempt = 0;
  uint64_t resume_step = 0;
  int64_t attempt_started_at = 0;
  std::string master_addr;
  uint32_t master_port = 0;
  CodeVersionSpec code;
  CheckpointPlanSpec checkpoint;
};

enum class CommandKind {
  kRestartInPlace,
  kActivate,
  kStop,
  kSetNcclMode,
  kPause,          // SIGSTOP the training processes
  kResume,         // SIGCONT them
  kCaptureStacks,  // stacks of every training-related process (result: stacks)
  kRunDiagnostic,  // one diagnostic (result: a DiagnosticOutcome)
  kSetMicroBatchPlan,  // S2: the micro-batch split from a step on (empty: back to the even split)
};
const char* CommandKindName(CommandKind kind);

// peregrine.v1.RunDiagnostic: kind, string params (agent/diagnostics/README.md) and a
// timeout (0: the kind's default).
struct DiagnosticRequest {
  DiagnosticKind kind = DiagnosticKind::kEud;
  std::map<std::string, std::string> params;
  uint32_t timeout_ms = 0;
  bool operator==(const DiagnosticRequest&) const = default;
};

struct CommandToSend {
  std::string pod;
  std::string id;  // deterministic: a resend after a controller restart has the same id
  CommandKind kind = CommandKind::kRestartInPlace;
  AssignmentSpec assignment;
  int grace_ms = 0;
  bool nccl_profiling = false;  // kSetNcclMode
  bool nccl_trap = false;       // kSetNcclMode
  bool include_native = false;  // kCaptureStacks
  DiagnosticRequest diagnostic;  // kRunDiagnostic
  // kSetMicroBatchPlan (peregrine.v1.SetMicroBatchPlan): no counts and plan_id 0 clears.
  struct MicroBatchPlan {
    uint64_t plan_id = 0;
    uint64_t from_step = 0;
    std::vector<uint32_t> counts;  // per DP replica, DP index order
    double gradient_scale = 0;
    uint32_t global_micro_batches = 0;
  } microbatch_plan;
};

struct JobEvent {
  JobEventType type = JobEventType::kNormal;
  std::string reason;
  std::string message;
};

// The role and assignment each pod's agent should hold (RegisterAck is built from it).
struct DesiredAgent {
  bool standby = false;
  AssignmentSpec assignment;
};

struct JobPlan {
  JobStatus status;  // the new status (persist when changed)
  std::vector<PodToCreate> create_pods;
  std::vector<PodToDelete> delete_pods;
  std::vector<CommandToSend> commands;
  std::vector<JobEvent> events;
  std::map<std::string, DesiredAgent> desired_agents;  // by pod name
  // Evicted machines not yet quarantined: the executor quarantines each and, on success,
  // sets quarantined on its evictions in `status` before persisting it.
  std::vector<QuarantineRequest> quarantine;
  int64_t requeue_after_ns = 0;  // look again after this long even without new observations
  bool Empty() const {
    return create_pods.empty() && delete_pods.empty() && commands.empty() && events.empty() && quarantine.empty();
  }
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_JOB_STATE_H_
