// TrainingJob: the plain-struct form of the peregrine.dev/v1alpha1 TrainingJob resource.
//
// One parser (job_parser.h) turns YAML or JSON text (a local job file, or the object
// the Kubernetes API server returns) into these structs; the CRD schema in
// crds/peregrine.dev_trainingjobs.yaml describes exactly the same fields. Field names
// in comments are the manifest's camelCase names. Defaults are the seeds' values.
//
// Plain data, no I/O; thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_JOB_SPEC_H_
#define PEREGRINE_CONTROLLER_CORE_JOB_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace peregrine {

struct CodeVersionSpec {
  std::string image;                       // image
  std::vector<std::string> command;        // command: argv, run without a shell (required)
  std::string revision;                    // revision
  std::map<std::string, std::string> env;  // env
  bool operator==(const CodeVersionSpec&) const = default;
};

// How training processes are started in a pod.
enum class LaunchMode {
  kPerGpu,      // "PerGPU": the agent starts one process per GPU with RANK/LOCAL_RANK set
};

struct ParallelismSpec {
  int tensor = 1;    // tensor
  int pipeline = 1;  // pipeline
  int data = 1;      // data
};

// standby: warm-standby pool sizing (ByteRobust: binomial P99).
struct StandbySpec {
  double daily_failure_rate = 0.01;      // dailyFailureRate: per machine per day, [0, 1]
  double replenish_horizon_hours = 1.0;  // replenishHorizonHours: time to bring a new standby up
  double percentile = 0.99;              // percentile: (0, 1)
  int min = 0;                           // min
  int max = 64;                          // max
};

// faultTolerance: ByteRobust's automated fault-tolerance knobs.
// faultTolerance.exitRules[]: what an exit of the training processes means. A rule matches
// a rank that exited with one of `exit_codes` (non-zero codes, inclusive ranges) or was
// killed by one of `signals`; no code or signal is in two rules (the parser refuses
// overlaps). How the matched exits of an attempt decide is controller/core/exit_policy.h.
enum class ExitAction {
  kRestartInPlace,  // "RestartInPlace": restart every machine in place at once, no diagnosis
  kFailJob,         // "FailJob": the job fails (phase Failed), nothing is restarted
  kIgnore,          // "Ignore": restart in place, not counted against maxRecoveries
};

struct ExitCodeRange {
  int first = 0;  // 1..255
  int last = 0;   // first..255
};

struct ExitRule {
  ExitAction action = ExitAction::kRestartInPlace;  // action (required)
  std::vector<ExitCodeRange> exit_codes;            // exitCodes: 42 or "3-5"
  std::vector<int> signals;                         // signals: 9, "SIGKILL" or "KILL" (1..64)
};

struct FaultToleranceSpec {
  int network_alarm_window_seconds = 300;  // networkAlarmWindowSeconds: alarms counted in this window
  int network_alarms_to_evict = 2;         // networkAlarmsToEvict: evict on this many alarms in the window
  int max_reattempts = 1;                  // maxReattempts: in-place reattempts before rollback
  double loss_spike_factor = 5.0;          // lossSpikeFactor: loss or grad-norm jump that triggers diagnosis
  double hot_update_window_hours = 24.0;   // hotUpdateWindowHours: lazy updates applied at the latest after this
  int restart_grace_seconds = 10;          // restartGraceSeconds: SIGTERM -> SIGKILL grace
  int heartbeat_timeout_seconds = 30;      // heartbeatTimeoutSeconds: silence before corroborating a lost agent
  int max_recoveries = 50;                 // maxRecoveries: give up (phase Failed) after this many
  // hangTimeoutSeconds: a running attempt whose slowest rank completes no step for
  // max(hangTimeoutSeconds, 10 x the job's mean iteration time) while every training
  // process is alive is hung: stacks are captured and aggregated (hang_policy.h).
  int hang_timeout_seconds = 60;
  // nodeUnreachableGraceSeconds: a pod whose node reports Ready=False/Unknown keeps its
  // machine this long while its agent heartbeats and its ranks make progress; evicted
  // past it, or at once when the agent falls silent too (pod_health.h JudgeNodeUnready).
  int node_unreachable_grace_seconds = 300;
  // startTimeoutSeconds: an attempt whose ranks complete no step in this long after it
  // started fails (a stuck rendezvous, a rank that never came up). Large jobs load data and
  // build communicators for minutes before their first step, hence 30 minutes.
  int start_timeout_seconds = 1800;
  std::vector<ExitRule> exit_rules;  // exitRules (see ExitRule)
};

enum class FailSlowMitigation {
  kAuto,         // "Auto": run the S1-S4 ladder
  kMonitorOnly,  // "MonitorOnly": detect and report, never act
};

// failSlow: Falcon/GREYHOUND detection and GUARD severity tiers.
struct FailSlowSpec {
  bool enabled = true;                       // enabled
  double change_point_probability = 0.9;     // changePointProbability
  double verify_threshold = 0.10;            // verifyThreshold: relative mean shift to confirm
  double suspicious_group_ratio = 1.1;       // suspiciousGroupRatio: x median of same-kind groups
  double mitigate_threshold = 0.10;          // mitigateThreshold: GUARD: mitigate at next checkpoint
  double replace_threshold = 0.20;           // replaceThreshold: GUARD: replace immediately
  FailSlowMitigation mitigation = FailSlowMitigation::kAuto;  // mitigation
};

// checkpoint: in-memory checkpoints (each machine keeps its ranks' shards in shared
// memory and copies them to peers outside its parallel groups).
struct CheckpointSpec {
  int interval_steps = 0;  // intervalSteps: the trainer saves every N steps; 0 disables checkpoints
  int backup_copies = 1;   // backupCopies: peers (outside the machine's TP/DP/PP groups) holding a copy
  // memoryLimit: bytes of shared memory an agent may use for shards (own + held), parsed
  // from a Kubernetes quantity ("8Gi"); 0: the limits of /dev/shm and the pod only.
  uint64_t memory_limit_bytes = 0;
  // backupBandwidth: bytes per second each agent may send to its backup holders, parsed
  // from a quantity ("500Mi"); 0: unlimited.
  uint64_t backup_bandwidth_bytes_per_second = 0;
  int persist_every_steps = 0;  // persistEverySteps: write the newest complete step to persistPath; 0: never
  std::string persist_path;     // persistPath: a directory inside the pod (hostPath / PVC mount)
  bool enabled() const { return interval_steps > 0; }
};

struct TrainingJobSpec {
  int machines = 0;         // machines (required): active machines
  int gpus_per_machine = 0; // gpusPerMachine (required)
  ParallelismSpec parallelism;  // parallelism (required): product == machines * gpusPerMachine
  LaunchMode launch = LaunchMode::kPerGpu;  // launch
  CodeVersionSpec code;     // codeVersion (required)
  std::string template_json;  // template: the pod template (PodTemplateSpec) as JSON text, "" if absent
  StandbySpec standby;
  FaultToleranceSpec fault_tolerance;
  FailSlowSpec fail_slow;
  CheckpointSpec checkpoint;
  // suspend: the job's pods are deleted (after saving to persistPath when the job persists
  // checkpoints) and it waits, phase Suspended; clearing it recreates the pods, which resume
  // from the persisted step (decide_suspend.cc).
  bool suspend = false;
};

// The label that queues a TrainingJob under Kueue: its value names the LocalQueue in the
// job's namespace (a DNS-1123 label, which is both a valid label value and a valid
// Workload spec.queueName). See controller/kube/kueue_workload.h.
inline constexpr char kKueueQueueNameLabel[] = "kueue.x-k8s.io/queue-name";

struct ObjectMeta {
  std::string name;       // required; a DNS-1123 label
  std::string namespace_ = "default";
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
};

struct TrainingJob {
  ObjectMeta metadata;
  TrainingJobSpec spec;
};

const char* LaunchModeName(LaunchMode mode);              // "PerGPU"
const char* FailSlowMitigationName(FailSlowMitigation m);  // "Auto", "MonitorOnly"

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_JOB_SPEC_H_
