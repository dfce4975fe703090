// HangPolicy: the controller's side of stack aggregation for hangs and MFU drops, as a
// pure function of the job's stack-diagnosis state and what the agents report.
//
// DecideHang(input, now, options) is called by the decision engine once per round and
// never fails (unusable replies are ignored). It returns the capture_stacks commands to
// send (deterministic ids, StackCaptureCommandId, so resends after a controller restart
// are idempotent), the updated investigation state and a verdict the engine carries out:
// kHangDetected (open an incident), kEvict (machine slots to evict), kReattempt, kResolved
// (the hang ended by itself) or kAbandoned (another failure took over). A verdict is
// repeated every round until the engine has acted on it. The detection rules, timeouts
// and MFU-drop rounds are described in hang_policy.cc.
//
// Pure: no clocks, no I/O; `now` is an input. Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_CORE_HANG_POLICY_H_
#define PEREGRINE_CONTROLLER_CORE_HANG_POLICY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller/core/job_state.h"
#include "diagnosis/parallel_layout.h"
#include "diagnosis/stack_parse.h"

namespace peregrine {

struct HangPolicyOptions {
  double hang_iterations = 10;                        // timeout floor in mean iterations
  int64_t capture_deadline_ns = 90'000'000'000;       // a pod silent this long is a suspect
  int mfu_rounds = 5;
  int64_t mfu_round_interval_ns = 10'000'000'000;
  double mfu_drop_factor = 2.0;                       // iteration time x healthy level
  int64_t mfu_sustain_ns = 30'000'000'000;
  uint64_t mfu_warmup_steps = 5;                      // steps of an attempt before its baseline counts
  double mfu_healthy_alpha = 0.2;                     // EWMA weight of a new healthy sample
  int mfu_min_flags = 3;                              // rounds the evicted group must be flagged in
  int64_t mfu_failslow_grace_ns = 300'000'000'000;    // Falcon-Detect's time to localize
  size_t max_investigations = 16;
};

// One pod's answer to a capture_stacks command.
struct StackCaptureReply {
  bool ok = false;
  std::string error;                                // when !ok
  std::map<int, std::vector<ProcessStack>> stacks;  // by global rank (ok)
};

struct HangPolicySlot {
  int index = 0;
  std::string pod;
  std::string machine_id;
  bool training_alive = false;  // pod running, agent connected, running the attempt's processes
  // The agent's link: a capture answer missing while the agent is disconnected, silent past
  // heartbeat_timeout_ns, or no longer holding the command (its stream dropped and came
  // back) was lost with the link and makes no suspect.
  bool agent_connected = false;
  int64_t agent_last_seen = 0;
};

struct HangPolicyInput {
  std::string command_prefix;  // "<namespace>/<job>"
  const ParallelLayout* layout = nullptr;
  int hang_timeout_seconds = 60;
  int64_t heartbeat_timeout_ns = 30'000'000'000;  // heartbeatTimeoutSeconds
  uint64_t attempt = 0;
  uint64_t resume_step = 0;
  uint64_t last_completed_step = 0;  // slowest rank
  double mean_iteration_seconds = 0;
  double recent_iteration_seconds = 0;  // this round's mean over agents (0: no timing)
  bool steady = false;         // phase Running, no open incident, no triage under way
  bool other_failure = false;  // a process exited or a machine is lost this round
  // Training is held on purpose (a fail-slow validation traps NCCL): no step is expected, so
  // the hang clock restarts and nothing is detected until the hold ends.
  bool held = false;
  bool fail_slow_localized = false;        // an open fail-slow finding is Localized
  int64_t fail_slow_profiling_since = 0;   // detected_at of an open, unlocalized finding (0: none)
  std::vector<HangPolicySlot> slots;
  std::map<std::string, StackCaptureReply> replies;  // by command id
  std::set<std::string> pending;                      // command ids sent and not answered
  StackDiagnosisStatus state;
};

struct StackCaptureRequest {
  std::string pod;
  std::string command_id;
};

enum class HangVerdict {
  kNone,         // nothing for the engine to do
  kHangDetected, // open a Hang incident now and hold it until the verdict (deadline)
  kEvict,        // evict `evict_slots` (kind Hang or MfuDrop) and restart the rest in place
  kReattempt,    // hang without outliers: restart every machine in place
  kResolved,     // the hang ended by itself: close the incident with no action
  kAbandoned,    // another failure took over the hang investigation
};

struct HangDecision {
  StackDiagnosisStatus state;
  std::vector<StackCaptureRequest> captures;  // to send now (not pending, not answered)
  std::vector<JobEvent> events;
  HangVerdict verdict = HangVerdict::kNone;
  InvestigationKind kind = InvestigationKind::kHang;  // verdicts other than kNone
  std::string signal;                // kHangDetected, kEvict, kReattempt: the evidence
  std::vector<int> evict_slots;      // kEvict
  std::string reason;                // kEvict / kReattempt: one line for the incident
  std::vector<std::string> details;  // kEvict / kReattempt: stack groups, suspects, choice
  int64_t hold_until = 0;            // kHangDetected: the investigation's deadline
  double silent_seconds = 0;         // kHangDetected: how long no step was made before detection
  int64_t wake_at = 0;               // look again at this time (0: no need)
};

// The hang timeout for a job (nanoseconds).
int64_t HangTimeoutNanos(int hang_timeout_seconds, double mean_iteration_seconds,
                         const HangPolicyOptions& options = {});

// The capture command id of `pod` in round `round` (1-based) of investigation `id`.
std::string StackCaptureCommandId(const std::string& command_prefix, const std::string& pod, uint64_t id,
                                  int round);

// The policy's input for the decision engine's round: slots from `status`, replies (of the
// newest investigation and later ones, the only ones DecideHang reads) and pending ids
// from the slots' agents (a reply's parsed threads, or its raw text parsed when
// an agent sent none; processes that are no rank, e.g. a per-machine launcher, count for
// every rank of their pod), the iteration times and the fail-slow findings. `steady`: the
// job runs with no open incident or triage; `other_failure`: another failure this round.
HangPolicyInput MakeHangPolicyInput(const TrainingJob& job, const JobStatus& status, const JobObservation& obs,
                                    const ParallelLayout* layout, bool steady, bool other_failure);

// Never fails: replies it cannot use (a rank outside the layout or outside the pod's
// slot) are ignored, so those ranks count as not captured.
HangDecision DecideHang(const HangPolicyInput& input, int64_t now, const HangPolicyOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_HANG_POLICY_H_
