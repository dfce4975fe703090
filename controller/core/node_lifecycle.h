// A machine's (Node's) health across jobs, GUARD style: healthy -> suspect -> quarantined
// -> sweeping -> healthy again, or retired after repeated failures. NodeLifecycleStep()
// takes one machine's record, one input (a bad reading against its peers, an eviction, a
// sweep's progress, an operator's return, or only the passing of time) and `now`, and
// returns the new record and the actions to take as data (cordon+taint, uncordon+untaint,
// start a sweep, label retired, an event). The record is persisted on the Node object as
// one label and a few annotations under peregrine.dev/ (EncodeNodeHealth /
// DecodeNodeHealth), so `kubectl get nodes -L peregrine.dev/health` shows it.
//
// Idempotence: every action except kStartSweep accompanies a change of the record, so
// applying an input to the record it produced returns that record and no action (a bad
// reading no newer than the last one counted, an eviction of a machine already out of
// service, a sweep result for a sweep that is not running and any input other than an
// operator's return that happened before the current state was entered are no-ops). kStartSweep is
// level-based: each step of a quarantined machine whose sweep is due repeats it with the
// same attempt number until kSweepStarted or kSweepNotStarted for that attempt is applied;
// the executor names the sweep after (node, attempt), so a repeat creates nothing new.
// DesiredNodeState() gives what the Node must look like for a record (level-based repair).
//
// Pure functions of (record, input, now, options): no clock, no I/O; thread-compatible.
// Times are Unix nanoseconds. Errors: absl::InvalidArgumentError naming the options field,
// the input field or the label/annotation key at fault.
#ifndef PEREGRINE_CONTROLLER_CORE_NODE_LIFECYCLE_H_
#define PEREGRINE_CONTROLLER_CORE_NODE_LIFECYCLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

enum class NodeHealth { kHealthy, kSuspect, kQuarantined, kSweeping, kRetired };
inline constexpr size_t kNodeHealthStates = 5;

// "healthy", "suspect", "quarantined", "sweeping", "retired" (the label's values).
absl::string_view NodeHealthName(NodeHealth state);
// The inverse of NodeHealthName; InvalidArgumentError for any other text.
absl::StatusOr<NodeHealth> ParseNodeHealth(absl::string_view text);

// A full sweep runs every machine check; a short one (after an over-eviction: the machine
// was evicted with its group but the culprit was elsewhere) only the quick ones.
enum class SweepKind { kFull, kShort };
absl::string_view SweepKindName(SweepKind kind);  // "full", "short"

// The most failure times a record keeps (and the most NodeLifecycleOptions::retire_failures).
inline constexpr size_t kMaxFailureHistory = 16;
// The longest reason a record keeps (longer ones are cut at a UTF-8 boundary, with "...").
inline constexpr size_t kMaxNodeHealthReason = 512;

struct NodeLifecycleOptions {
  // Peer-based detection, temporal filtering: the first bad reading makes a machine
  // suspect; it is quarantined once its episode has at least confirm_count bad readings
  // spanning at least confirm_window (first to last); a suspect with no bad reading for
  // suspect_clear_after is healthy again and its episode forgotten.
  int64_t confirm_window_ns = 5LL * 60 * 1'000'000'000;
  int confirm_count = 3;
  int64_t suspect_clear_after_ns = 15LL * 60 * 1'000'000'000;
  // Retirement: retire_failures failures within failure_window (K in D days) retire the
  // machine. A failure: a fault eviction, a quarantine confirmed by bad readings, a failed
  // or timed-out sweep. An over-eviction is not one.
  int retire_failures = 3;
  int64_t failure_window_ns = 7LL * 24 * 3600 * 1'000'000'000;
  // After a failed sweep the next one waits sweep_backoff, doubled for each further
  // failure in the window, at most sweep_backoff_max.
  int64_t sweep_backoff_ns = 10LL * 60 * 1'000'000'000;
  int64_t sweep_backoff_max_ns = 6LL * 3600 * 1'000'000'000;
  // A sweep that could not start is tried again after sweep_retry.
  int64_t sweep_retry_ns = 5LL * 60 * 1'000'000'000;
  // A sweep running longer than sweep_timeout counts as failed.
  int64_t sweep_timeout_ns = 2LL * 3600 * 1'000'000'000;
};

// OK, or InvalidArgumentError naming the first bad field ("confirm_count: must be at least
// 1, got 0"). Durations must be positive (confirm_window may be 0) and at most 365 days;
// confirm_count in [1, 1000]; retire_failures in [1, kMaxFailureHistory];
// sweep_backoff_max >= sweep_backoff.
absl::Status ValidateNodeLifecycleOptions(const NodeLifecycleOptions& options);

// One machine's record. Field meanings depend on the state; the others stay at their
// defaults (NodeLifecycleStep keeps that invariant, DecodeNodeHealth checks it).
struct NodeHealthRecord {
  std::string node;  // the Node's name (not encoded: it is the object's name)
  NodeHealth state = NodeHealth::kHealthy;
  int64_t since = 0;   // when the state was entered (0: never changed)
  std::string reason;  // why (the last transition's summary), at most kMaxNodeHealthReason
  // kSuspect: the episode's bad readings (count, first and last time).
  int bad_readings = 0;
  int64_t first_bad_at = 0;
  int64_t last_bad_at = 0;
  // Sweeps. sweep_attempts counts the sweeps ever started on the machine (never reset, so
  // (node, attempt) names one sweep); the running one (kSweeping, attempt sweep_attempts)
  // or the next one (kQuarantined, attempt sweep_attempts + 1) is of kind sweep_kind
  // (kFull in the other states).
  SweepKind sweep_kind = SweepKind::kFull;
  int sweep_attempts = 0;
  int64_t sweep_due_at = 0;      // kQuarantined: when the next sweep may start
  int64_t sweep_started_at = 0;  // kSweeping: when it started
  std::string sweep_blocked;     // kQuarantined: why the last try could not start ("": none)
  // Failure times within failure_window, oldest first, at most kMaxFailureHistory.
  std::vector<int64_t> failures;

  friend bool operator==(const NodeHealthRecord&, const NodeHealthRecord&) = default;
};

enum class NodeInputKind {
  kBadReading,       // an inspection reading or a fail-slow attribution judged this machine
                     // bad against its peers in the same job
  kFaultEviction,    // evicted as the culprit (machine fault)
  kOverEviction,     // evicted with others, turned out healthy (the culprit was elsewhere)
  kSweepStarted,     // sweep `sweep_attempt` started
  kSweepPassed,      // sweep `sweep_attempt` passed
  kSweepFailed,      // sweep `sweep_attempt` failed (`detail`: what failed)
  kSweepNotStarted,  // sweep `sweep_attempt` could not start (`detail`: "no image", ...)
  kOperatorReturn,   // an operator returned the machine to service
  kTick,             // nothing happened: only the timers run
};
absl::string_view NodeInputKindName(NodeInputKind kind);

struct NodeInput {
  NodeInputKind kind = NodeInputKind::kTick;
  int64_t at = 0;           // when it happened; after `now` is taken as `now`
  std::string detail;       // what: "fail-slow: rank 5 2.9x slower than its peers", a reason
  int sweep_attempt = 0;    // the sweep inputs: the attempt they are about (>= 1)
};

enum class NodeActionKind {
  kCordonAndTaint,      // cordon, add taint kQuarantineTaintKey:NoSchedule
  kUncordonAndUntaint,  // remove the taint; uncordon only a cordon that was Peregrine's
                        // (cordons.h: never a node someone else had cordoned first)
  kStartSweep,          // run sweep `sweep_attempt` of kind `sweep_kind` on the node
  kLabelRetired,        // the state label says retired (the label is the record's; the
                        // action is the cue to alert on it)
  kEvent,               // record an event on the Node
};

struct NodeAction {
  NodeActionKind kind = NodeActionKind::kEvent;
  SweepKind sweep_kind = SweepKind::kFull;  // kStartSweep
  int sweep_attempt = 0;                    // kStartSweep
  bool warning = false;                     // kEvent: Warning rather than Normal
  std::string reason;                       // kEvent: "NodeQuarantined"
  std::string message;                      // kEvent: the figures that drove it
};

struct NodeLifecycleResult {
  NodeHealthRecord record;
  std::vector<NodeAction> actions;
};

// Runs the timers of `record` up to `now` (a quiet suspect clears, a sweep past its
// timeout fails, failures older than failure_window are forgotten), applies `input`, and
// asks for the due sweep of a quarantined machine. InvalidArgumentError for invalid
// options, now <= 0, input.at <= 0, or a sweep input without sweep_attempt >= 1.
absl::StatusOr<NodeLifecycleResult> NodeLifecycleStep(const NodeHealthRecord& record, const NodeInput& input,
                                                      int64_t now, const NodeLifecycleOptions& options);

// What the Node must look like for `record` (for repairing it level-based).
struct NodeHealthDesired {
  bool cordoned_and_tainted = false;  // quarantined, sweeping or retired
  bool retired = false;
};
NodeHealthDesired DesiredNodeState(const NodeHealthRecord& record);

// Work that falls due with time alone: feed NodeInput{kTick} to NodeLifecycleStep.
enum class DueWorkKind {
  kStartSweep,     // quarantined, the sweep's due time has come
  kClearSuspect,   // suspect, quiet for suspect_clear_after
  kSweepTimedOut,  // sweeping for longer than sweep_timeout
};
struct DueWork {
  std::string node;
  DueWorkKind kind = DueWorkKind::kStartSweep;
  int64_t due_at = 0;
};

// When `record`'s next timer falls due (0: none).
int64_t NextDueAt(const NodeHealthRecord& record, const NodeLifecycleOptions& options);
// The records' work due at `now`, in the order of `records`.
std::vector<DueWork> ListDueWork(const std::vector<NodeHealthRecord>& records, int64_t now,
                                 const NodeLifecycleOptions& options);

// Kubernetes names. The taint that keeps new pods off an out-of-service machine (effect
// NoSchedule); a sweep's pod must tolerate it and node.kubernetes.io/unschedulable.
inline constexpr char kQuarantineTaintKey[] = "peregrine.dev/quarantined";
inline constexpr char kQuarantineTaintEffect[] = "NoSchedule";
// The record on the Node: the state label and the annotations (values in
// docs/kubernetes.md). Times are RFC 3339 UTC with nanoseconds.
inline constexpr char kNodeHealthLabel[] = "peregrine.dev/health";
inline constexpr char kNodeHealthSinceAnnotation[] = "peregrine.dev/health-since";
inline constexpr char kNodeHealthReasonAnnotation[] = "peregrine.dev/health-reason";
inline constexpr char kNodeHealthSuspectAnnotation[] = "peregrine.dev/health-suspect";
inline constexpr char kNodeHealthSweepAnnotation[] = "peregrine.dev/health-sweep";
inline constexpr char kNodeHealthSweepBlockedAnnotation[] = "peregrine.dev/health-sweep-blocked";
inline constexpr char kNodeHealthFailuresAnnotation[] = "peregrine.dev/health-failures";
// Every annotation key above: an update removes the ones an encoding leaves out.
inline constexpr std::array<const char*, 6> kNodeHealthAnnotationKeys = {
    kNodeHealthSinceAnnotation, kNodeHealthReasonAnnotation, kNodeHealthSuspectAnnotation,
    kNodeHealthSweepAnnotation, kNodeHealthSweepBlockedAnnotation, kNodeHealthFailuresAnnotation};

struct NodeHealthMetadata {
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
};

// The record as the label and the annotations it needs (those at their defaults are left
// out). Never fails; a reason longer than kMaxNodeHealthReason is cut, failures beyond
// kMaxFailureHistory drop the oldest.
NodeHealthMetadata EncodeNodeHealth(const NodeHealthRecord& record);

// Reads the record of Node `node` from all of its labels and annotations (other keys are
// ignored). A Node with none of ours is a healthy machine never seen (the default record).
// InvalidArgumentError naming the key for a missing label beside our annotations, any text
// that does not parse, a time before 1970 or after 2262, a count out of range, failures not
// oldest first or more than kMaxFailureHistory, or a field that does not belong to the
// state (e.g. sweeping without a start time). Never crashes on any input.
absl::StatusOr<NodeHealthRecord> DecodeNodeHealth(const std::string& node,
                                                  const std::map<std::string, std::string>& labels,
                                                  const std::map<std::string, std::string>& annotations);

// Metrics (another module exports them): gauge kNodeHealthMachinesMetric{state=<name>},
// the machines in each state.
inline constexpr char kNodeHealthMachinesMetric[] = "peregrine_node_health_machines";
inline constexpr char kNodeHealthMachinesHelp[] = "Machines (Nodes) in each node health state";
inline constexpr char kNodeHealthStateLabelName[] = "state";
// Counts of `records` per state, indexed by static_cast<size_t>(NodeHealth).
std::array<int64_t, kNodeHealthStates> CountNodeHealth(const std::vector<NodeHealthRecord>& records);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_NODE_LIFECYCLE_H_
