// FailSlowMitigation: Falcon's mitigation ladder for a localized fail-slow, escalated by
// ski-rental, as a pure decision on one finding and its persisted record.
//
// The ladder: S1 ignore (watch; below spec.failSlow.mitigateThreshold nothing else),
// S2 redistribute micro-batches across data-parallel replicas, S3 remap machines to slots
// (topology), S4 replace (evict the slow machine(s), activate a standby, restart from the
// checkpoint). S2 and S3 are inputs (StrategyAvailability): a strategy that is
// unavailable for the job is reported once per finding with its reason and skipped. S2's
// availability, cost and plan are controller/core/microbatch_mitigation.h's; after S2 the
// loss is the residual slowdown measured under the plan (measured_iteration_seconds).
//
// Escalation (ski-rental, the deterministic break-even rule): while on a strategy, the
// loss of staying accumulates (seconds of training wasted, failslow_mitigation.cc says
// how); the ladder moves to the next available strategy when that loss reaches the
// strategy's one-time cost. The rule is 2-competitive: whatever the (unknown) remaining
// duration of the slowdown, the loss it pays is at most twice the loss of the best
// offline choice (stay for ever, or switch at once); the argument is in the .cc. The GUARD
// tier (FailSlowTierOf) is a label only: a "replace" severity does not skip the rent.
// Costs are measured (MeasureRestartCost: the job's own recoveries, else its start-up);
// with nothing measured the ladder does not escalate and says so.
//
// S4 acts only on fresh evidence: a GEMM judged at most evidence_max_age_ns ago (the
// validation's, or a re-confirmation the ladder asks for) must name a slow GPU on each
// machine it evicts. Older evidence makes the ladder ask for a GEMM re-confirmation
// (gemm_wanted: ApplyFailSlowPolicy runs it through the validation, training paused) and
// wait; fresh evidence that names none of the attributed machines refutes the
// attribution: the ladder stops and the finding is closed (refuted), never escalated.
// A communication finding whose validation was deferred (failslow_validation.h) asks for
// its GEMM at the same point, the only one where a measured slow GPU leads to an action.
//
// S4 is decided here and carried out by the decision engine (decide_triage.cc through
// PendingFailSlowReplacement): the machines are evicted under an incident of kind
// FailSlow as for any machine fault (cordoned, a standby activated, restart from the
// in-memory checkpoint). Mitigation MonitorOnly reports the same figures and never acts.
//
// Pure: no clocks, no I/O; `now` is an input. Deciding again on the applied record at the
// same `now` changes nothing. Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_CORE_FAILSLOW_MITIGATION_H_
#define PEREGRINE_CONTROLLER_CORE_FAILSLOW_MITIGATION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

// Whether a strategy (S2, S3) can be delivered for the job, and its one-time cost.
struct StrategyAvailability {
  bool available = false;
  std::string unavailable_reason;  // shown once per finding when !available
  double cost_seconds = 0;         // measured; <= 0: not measured (no escalation to it)
  std::string cost_source;
};

// The measured one-time cost of S4 (evict, activate a standby, restart from checkpoint).
struct RestartCost {
  double seconds = 0;  // <= 0: nothing measured yet
  std::string source;  // which measurement, with its figures
};

// The job's restart cost as measured: the median over its recovered incidents that
// restarted training of (first step after the restart - detection) + steps redone x
// `iteration_seconds` (the status's mean iteration time when <= 0); before any such
// incident, attempt 1's start-up (JobStatus::first_step_seconds) plus the steps since the
// newest complete checkpoint x `iteration_seconds` (what a restart now would redo); else
// nothing.
RestartCost MeasureRestartCost(const JobStatus& status, double iteration_seconds);

struct FailSlowMitigationInput {
  FailSlowSpec spec;
  FailSlowFinding finding;  // with its record (finding.mitigation)
  // The machine of each rank the finding (or its validation) names; "" or absent: unknown.
  std::map<int, std::string> rank_machines;
  std::vector<std::string> job_machines;  // the machines of the job's slots now
  StrategyAvailability redistribute;  // S2
  StrategyAvailability remap;         // S3
  RestartCost restart_cost;           // S4
  // The job's iteration time measured under the strategy in force (S2: with the plan
  // running); > 0 replaces the finding's slow level in the loss rate (the residual
  // slowdown against the healthy level). 0: not measured.
  double measured_iteration_seconds = 0;
  // S4 needs a GEMM judged at most this long ago naming the machine (see above).
  int64_t evidence_max_age_ns = 300'000'000'000;
};

// An action of the ladder, as data: S2 (the plan is microbatch_mitigation.h's), S3 (not
// delivered in this version) or S4 (evict `machines`).
struct MitigationAction {
  MitigationStrategy strategy = MitigationStrategy::kReplace;
  std::vector<std::string> machines;
  std::string reason;  // the figures that drove it
};

struct FailSlowMitigationDecision {
  FailSlowMitigationRecord record;
  std::vector<MitigationAction> actions;  // decided in this call (also in the record)
  std::vector<JobEvent> events;
  // The ladder is at S4's break-even without fresh GEMM evidence: a GEMM (re-)confirmation
  // of the finding's machines is wanted now (ApplyFailSlowPolicy starts it).
  bool gemm_wanted = false;
  // Fresh GEMM evidence names none of the attributed machines: the ladder stopped
  // (record.stopped_at) and the finding is to be closed; refuted_reason has the figures.
  bool refuted = false;
  std::string refuted_reason;
};

// Never fails. A finding the ladder never saw that has already ended is left as is.
FailSlowMitigationDecision DecideFailSlowMitigation(const FailSlowMitigationInput& input, int64_t now);

// The fail-slow replacement the decision engine has to carry out: the newest finding
// whose ladder decided S4, still open, whose incident is not opened yet (incident_id 0)
// or is `open_incident_id`; the slots now holding its machines. nullopt when none (or
// its machines have left the job).
struct FailSlowReplacement {
  uint64_t finding_id = 0;
  uint64_t incident_id = 0;
  std::vector<int> slots;
  std::string reason;
};
std::optional<FailSlowReplacement> PendingFailSlowReplacement(const JobStatus& status, uint64_t open_incident_id);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_FAILSLOW_MITIGATION_H_
