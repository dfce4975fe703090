// FailSlowPolicy: the controller's side of Falcon-Detect (tracking -> profiling ->
// localization), as a pure function of the job's fail-slow state and what the agents
// report.
//
// DecideFailSlow(input, now) opens a finding when a rank of the current attempt reports a
// verified slowdown (failslow_peers.h: a slowdown most ranks share is reported as job-wide,
// not as theirs; persistent stragglers relative to their peers are named, and open a
// finding with options.peers.stragglers_are_slow), switching NCCL
// profiling on for every active agent, localizes it
// from the agents' comm profiles (CompareGroups: compute and/or communication suspects),
// and ends it when no rank is slow any more (profiling off). It never fails: unusable
// inputs are skipped. Level-based: deciding again on the applied result changes nothing.
// ApplyFailSlowPolicy merges it and the validation (failslow_validation.h) into a plan.
// FailSlowTierOf gives the GUARD tier (a label); the mitigation ladder is
// failslow_mitigation.h, which ApplyFailSlowPolicy runs last. The flow is described in
// failslow_policy.cc.
//
// Pure: no clocks, no I/O; `now` is an input. Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_CORE_FAILSLOW_POLICY_H_
#define PEREGRINE_CONTROLLER_CORE_FAILSLOW_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/failslow_peers.h"
#include "controller/core/failslow_validation.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

inline constexpr size_t kMaxFailSlowFindings = 32;

struct FailSlowPolicyOptions {
  // Collectives every member of a communicator must have profiled before comparing.
  int min_collectives = 8;
  double min_late_fraction = 0.7;          // CompareGroups (compute suspects; see group_comparison.h)
  double min_imposed_wait_fraction = 0.1;  // CompareGroups (compute suspects)
  // A suspicious group is named only when its mean transfer exceeds the median of its kind
  // by at least this fraction of the healthy iteration time.
  double min_excess_transfer_fraction = 0.02;
  // Job-wide slowdowns and persistent stragglers relative to the peers (failslow_peers.h).
  PeerSlowdownOptions peers;
  // S4 evicts only on a GEMM judged at most this long ago that names the machine; older
  // evidence is re-confirmed first (FailSlowMitigationInput::evidence_max_age_ns).
  int64_t evidence_max_age_ns = 300'000'000'000;
};

// The job's fail-slow inputs: its spec section, layout, persisted findings, the machine of
// each slot, and the agents of the current attempt.
struct FailSlowPolicyInput {
  std::string job_name;  // for command ids
  FailSlowSpec spec;
  const ParallelLayout* layout = nullptr;
  uint64_t attempt = 0;
  std::vector<FailSlowFinding> findings;  // as persisted, newest last
  uint64_t next_finding_id = 1;
  std::vector<std::string> slot_machines;  // machine id of slot i ("" unknown)
  std::vector<AgentObservation> agents;
};

struct NcclModeChange {
  std::string pod;
  std::string command_id;
  bool profiling = false;
};

struct FailSlowDecision {
  std::vector<FailSlowFinding> findings;
  uint64_t next_finding_id = 1;
  std::vector<NcclModeChange> mode_changes;
  std::vector<JobEvent> events;
};

// GUARD tier of a severity under the spec's thresholds.
FailSlowTier FailSlowTierOf(const FailSlowSpec& spec, double severity);

// Never fails: inputs it cannot use (a profile of an unknown communicator, inconsistent
// timings) are skipped. With spec.enabled false no finding opens (open ones still end).
FailSlowDecision DecideFailSlow(const FailSlowPolicyInput& input, int64_t now,
                                const FailSlowPolicyOptions& options = {});

// The job controller's entry point: runs DecideFailSlow on the plan's new status and the
// round's agent observations, then DecideFailSlowValidation (controller/failslow_validation.h)
// on the newest finding, then the mitigation ladder (failslow_mitigation.h) on every
// finding, and merges them into the plan (status findings with their validation and
// mitigation record, set_nccl_mode and run_diagnostic commands, events; a requeue of
// 100 ms when the ladder decided S2 or S4, S4 being carried out by the decision engine;
// the GEMM re-confirmation the ladder asks for before S4, started in the same round; a
// finding whose attribution the fresh GEMM refuted closed as Recovered at `now`),
// and keeps S2's micro-batch plan (microbatch_mitigation.h: set_microbatch_plan commands;
// profiling stays on while a plan is in force). The link rounds'
// rendezvous is slot 0's pod ("<pod>.<rendezvous domain>", 127.0.0.1 without a domain) at
// the observation's candidate port. A spec whose layout is invalid leaves the plan as is.
void ApplyFailSlowPolicy(const TrainingJob& job, const JobObservation& observation, int64_t now, JobPlan* plan,
                         const FailSlowPolicyOptions& options = {},
                         const FailSlowValidationOptions& validation_options = {});

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_FAILSLOW_POLICY_H_
