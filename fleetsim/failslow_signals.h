// FailSlowSignals: what the simulated agents report about a fail-slow, synthesised from
// the fault list the way a real agent would measure it, for the fail-slow policy of the
// real decision core (controller/core/failslow_policy.h):
//  - the tracking latency of a verified slowdown (the agent's change-point detector needs
//    `verify_iterations` iterations after the change, then a heartbeat delivers it);
//  - the NCCL comm profiles of every rank (SynthesizeCommProfiles) while profiling is on:
//    per-collective durations on each member's own clock, from the layout's TP, PP and DP
//    communicators and the slots' fail-slow state (a slow GPU's rank arrives last; a
//    congested machine's data-parallel groups transfer slower);
//  - the validation diagnostics' results (SimulatedGemm, SimulatedLinkRounds): an ORACLE
//    of the fault list, like the simulator's other diagnostics.
// Every modelling assumption is a field of FailSlowSignalOptions (docs/simulation.md gives
// the sources and what is assumed).
//
// Pure functions; no I/O. Thread-compatible (LinkRoundsCache is one caller's).
#ifndef PEREGRINE_FLEETSIM_FAILSLOW_SIGNALS_H_
#define PEREGRINE_FLEETSIM_FAILSLOW_SIGNALS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "controller/core/job_state.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine::fleetsim {

struct FailSlowSignalOptions {
  // Tracking: iterations after the change point the agent's detector needs to verify it
  // (diagnosis/change_point.h FailSlowDetectorOptions::verify_after) and the heartbeat
  // that delivers it (agent/agent.h heartbeat_ms). A slowdown below the spec's
  // verifyThreshold is never reported (the detector does not verify it).
  int verify_iterations = 8;
  double heartbeat_s = 1.0;
  // Profiles: each communicator's recent collectives (the policy compares at least 8 per
  // communicator; S2 measures a replica's waiting share over the spans of its newest 8 DP
  // collectives, which needs 9). Transfer time of one collective as a fraction of the healthy step
  // (assumed: a tensor-parallel all-reduce inside the machine, a pipeline send/recv, the
  // data-parallel gradient all-reduce), and the arrival jitter of healthy ranks.
  int collectives = 9;
  double tp_transfer_fraction = 0.002;
  double pp_transfer_fraction = 0.005;
  double dp_transfer_fraction = 0.05;
  double jitter_fraction = 0.0001;
  // A slow GPU's rank is late at each collective by severity x step / sync_points (its
  // step's extra compute spread over the step's synchronisation points); the other ranks
  // of its machine, held by the tensor-parallel all-reduce, are late by half that in their
  // pipeline and data-parallel groups.
  int sync_points = 4;
  // Validation (oracle): GEMM throughput of a healthy GPU, divided by 1 + severity on the
  // slow GPU; link rates inside a machine and across machines, divided by
  // 1 + severity / dp_transfer_fraction on a congested machine's links (the job's whole
  // slowdown is in the data-parallel transfer). Durations of one pass of each diagnostic.
  double gemm_tflops = 50;
  double intra_link_gbps = 150;
  double inter_link_gbps = 25;
  double gemm_s = 10;
  double links_s = 20;
  // S2: the micro-batches each data-parallel replica runs per step without a plan
  // (assumed; the trainer follows the core's set_microbatch_plan). A replica's step
  // compute is proportional to its micro-batches times its slowest GPU's slowdown.
  uint32_t micro_batches = 16;
};

// A slot's fail-slow state: a compute episode slows one GPU (`slow_gpu`, its local rank)
// by `compute`; a link episode congests the machine's links by `link`. 0: none.
struct SlotSlowState {
  int slow_gpu = -1;
  double compute = 0;
  double link = 0;
};

// Seconds from a change of the job's iteration time to the agents' report of it.
double TrackingLatencySeconds(const FailSlowSignalOptions& options, double step_s, double slowdown);

// Each data-parallel replica's step time relative to the healthy step: its micro-batches
// (`micro_batches` per replica; empty: options.micro_batches each) over the even share,
// times 1 + the largest compute slowdown of its slots.
std::vector<double> ReplicaStepFactors(const ParallelLayout& layout, const std::vector<SlotSlowState>& slots,
                                       const std::vector<uint32_t>& micro_batches,
                                       const FailSlowSignalOptions& options);

// The job's step-time growth: the slowest replica's factor - 1, or the largest link
// slowdown if larger (S2 does not help a congested link).
double JobSlowdown(const std::vector<double>& replica_factors, const std::vector<SlotSlowState>& slots);

// The comm profiles of every rank, by slot (slot s: its ranks' profiles, one per
// communicator of size >= 2). `slots` has layout.machines() entries; `micro_batches` as
// for ReplicaStepFactors. Deterministic.
std::vector<std::vector<CommProfileObservation>> SynthesizeCommProfiles(const ParallelLayout& layout,
                                                                        const std::vector<SlotSlowState>& slots,
                                                                        const std::vector<uint32_t>& micro_batches,
                                                                        double step_s,
                                                                        const FailSlowSignalOptions& options);

// The `gemm` diagnostic of one machine: figures gpu<i>_tflops.
DiagnosticOutcome SimulatedGemm(const SlotSlowState& slot, int gpus_per_machine, const FailSlowSignalOptions& options);

// The parsed `rounds` parameter of p2p_rounds ("r0:s>d,s>d;r1:..."), kept for the last
// text seen (every machine of a validation gets the same one).
class LinkRoundsCache {
 public:
  // The (sender, receiver) links, sorted; an unparsable pair is skipped.
  const std::vector<std::pair<int, int>>& Links(const std::string& rounds);

 private:
  std::string text_;
  std::vector<std::pair<int, int>> links_;
  bool parsed_ = false;
};

// The `p2p_rounds` diagnostic of slot `slot`: figures link_<s>_<d>_gbps for the links
// whose sender is one of its ranks. `links` sorted (LinkRoundsCache::Links); `slots` as
// for SynthesizeCommProfiles.
DiagnosticOutcome SimulatedLinkRounds(const ParallelLayout& layout, int slot, const std::vector<SlotSlowState>& slots,
                                      const std::vector<std::pair<int, int>>& links,
                                      const FailSlowSignalOptions& options);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_FAILSLOW_SIGNALS_H_
