// FailSlowValidation: validating a localized fail-slow finding while training is paused
// (NCCL calls trapped), as a pure, persisted state machine.
//
// DecideFailSlowValidation(input, now) starts a validation for a Localized finding whose
// validation has not run, or advances the one in progress through Pausing -> Gemm ->
// Links -> Resuming -> Done, returning the set_nccl_mode / run_diagnostic commands to send
// (deterministic ids) and whether NCCL must stay trapped. The verdict is confirmed (a GPU
// or link measured slow), not confirmed, or failed (with the reason); every failure path
// still resumes training, never restarts it. Level-based: a command is (re-)emitted only
// while it has no result and is not pending, so deciding again on the applied state emits
// nothing new. The phases and judging rules are described in failslow_validation.cc.
//
// Two cases beyond the validation at localization:
//  - deferred: with mitigation Auto, a communication-only finding is not validated while
//    S3 (remap) is unavailable (remap_available false): the only action its link rounds
//    could lead to is S3, so pausing for them buys nothing. It is recorded (detail, event
//    FailSlowValidationDeferred) and its GEMM runs only if the ladder reaches S4's
//    break-even (gemm_requested), where a GPU measured slow is evicted. MonitorOnly
//    validates as before (it measures and reports what Auto would meet);
//  - GEMM (re-)confirmation (gemm_requested, asked by the ladder before S4): a run with
//    GEMM only (no link rounds, link_kinds ""), from NotStarted or Done. While it runs
//    after an earlier run, ended_at keeps that run's end (started_at > ended_at) and its
//    command ids carry "c<started_at>-" after the finding's prefix, so the earlier run's
//    results are never taken for its own.
//
// Pure: no clocks, no I/O; `now` is an input. Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_CORE_FAILSLOW_VALIDATION_H_
#define PEREGRINE_CONTROLLER_CORE_FAILSLOW_VALIDATION_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

// One command's result as the agent reported it (the plain form of CommandResult with a
// DiagnosticResult payload).
struct ValidationCommandOutcome {
  bool ok = false;    // status OK
  std::string error;  // the status message when !ok
  bool passed = false;
  bool not_present = false;
  std::string detail;
  std::map<std::string, double> figures;
};

struct ValidationAgent {
  std::string pod;
  int slot = -1;        // the machine slot it holds; -1 for none (standby)
  bool active = false;  // connected and running the current attempt
  bool profiling = false;
  std::vector<std::string> pending_command_ids;
  std::map<std::string, ValidationCommandOutcome> results;  // by command id
};

struct FailSlowValidationOptions {
  bool gemm_every_machine = true;  // false: only the suspect groups' machines
  std::string gemm_dtype = "fp32";
  int gemm_size = 0;        // 0: the diagnostic's default (1024)
  int gemm_iterations = 0;  // 0: as many as fill the tool's timed window
  // Bytes per link transfer. Note: on the stand-in cluster (CPU processes on a shared,
  // loaded host) healthy links measured up to 2-3x apart at 1 MiB and 1.5-1.9x at 16 MiB,
  // where a 20 ms-per-message link was 2x (1 MiB) or 1.7x (16 MiB) the median of its kind.
  uint64_t link_bytes = 1 << 20;
  // A link is slow above this multiple of its kind's median time. Higher than the 1.1 of
  // profiling: link timings are the noisiest measurement here, while a congested link is
  // several times slower.
  double link_slow_ratio = 1.5;
  // A GPU is slow above this multiple of the median GEMM time (the stand-in's CPU GEMM
  // varies by ~10% between GPUs of a loaded host; a slow GPU is far beyond).
  double gemm_slow_ratio = 1.2;
  // Each measurement runs this many times; the best result of each GPU and link counts.
  int passes = 2;
  uint32_t gemm_timeout_ms = 60'000;
  uint32_t links_timeout_ms = 120'000;
  // A phase fails when its results are not all in this long after it began (the
  // diagnostics' own timeouts plus a margin for delivery).
  // Pausing: an agent acknowledges the trap only once every training process on it is
  // really paused (no NCCL call moving, a thread held in the trap or blocked in a call),
  // and reports which rank did not pause after its own 20 s.
  int64_t pause_deadline_ns = 30'000'000'000;
  int64_t phase_margin_ns = 30'000'000'000;
};

struct FailSlowValidationInput {
  std::string job_name;  // for command ids
  const ParallelLayout* layout = nullptr;
  FailSlowSpec spec;
  FailSlowFinding finding;                  // the finding to validate, validation state inside
  std::vector<std::string> slot_machines;   // machine id of slot i
  std::vector<std::string> slot_addresses;  // rendezvous host of slot i's pod
  uint32_t candidate_port = 0;              // a free port (recorded when validation starts)
  std::vector<ValidationAgent> agents;
  bool remap_available = false;  // S3 can be delivered for the job (else deferral, above)
  bool gemm_requested = false;   // the ladder wants a GEMM (re-)confirmation now
};

struct ValidationCommand {
  enum class Kind { kSetNcclMode, kRunDiagnostic };
  Kind kind = Kind::kSetNcclMode;
  std::string pod;
  std::string id;
  bool profiling = false;  // kSetNcclMode
  bool trap = false;       // kSetNcclMode
  DiagnosticKind diagnostic = DiagnosticKind::kGemm;  // kRunDiagnostic: kGemm | kP2pRounds
  std::map<std::string, std::string> params;
  uint32_t timeout_ms = 0;
};

struct FailSlowValidationDecision {
  FailSlowValidation validation;
  std::vector<ValidationCommand> commands;
  std::vector<JobEvent> events;
  bool trap_wanted = false;  // NCCL must stay trapped (Pausing, Gemm, Links)
};

// True while the validation holds training paused or is releasing it.
bool ValidationInProgress(const FailSlowValidation& v);

// Starts a validation for a Localized finding whose validation has not run (unless
// deferred), a GEMM-only run when gemm_requested and none is in progress, advances one in
// progress, and otherwise returns the state unchanged with no commands.
FailSlowValidationDecision DecideFailSlowValidation(const FailSlowValidationInput& input, int64_t now,
                                                    const FailSlowValidationOptions& options = {});

// The link rounds of every group of `kinds` (groups of size >= 2), in global ranks, as the
// p2p_rounds `rounds` parameter ("r0:s>d,s>d;r1:..."), and the kind of each link.
struct ValidationLinkPlan {
  std::string rounds;
  std::map<std::pair<int, int>, GroupKind> link_kind;  // (sender, receiver) -> kind
  int round_count = 0;
};
absl::StatusOr<ValidationLinkPlan> PlanValidationLinks(const ParallelLayout& layout,
                                                       const std::vector<GroupKind>& kinds);

// The suspect groups of a finding: each slow rank's groups (compute) and the groups named
// in `group` ("dp 0, pp 1"); groups of size 1 are left out. kInvalidArgument naming the
// text for a group it cannot parse.
absl::StatusOr<std::vector<CommGroup>> SuspectGroups(const ParallelLayout& layout, const FailSlowFinding& finding);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_FAILSLOW_VALIDATION_H_
