// The controller's peer view of the ranks' slowdowns (diagnosis/peer_stragglers.h applied to
// what the agents report each round): whether a slowdown is job-wide (shared by most ranks,
// so not one rank's) and which ranks are persistent stragglers relative to their peers.
//
// ClassifyRankSlowdowns(ranks, options):
//  - job-wide: more than job_wide_fraction of the job's ranks report a verified slowdown
//    (their agents' change points) at once, with at least min_workers ranks in the job:
//    the ranks' median iteration time itself moved, which is a change of the job, not of a
//    rank relative to its peers;
//  - stragglers: on the cross-section of the ranks' latest iteration times (one value per
//    rank that reported one), the peer rule of AnalyzePeerStragglers: z = (t - median) /
//    max(1.4826 x MAD, min_relative_scale x median) > persistent_z AND t / median - 1 >
//    min_relative_excess, with at least min_workers ranks reporting a time.
// ClassifyAgentSlowdowns gathers those inputs from the agents' observations.
// Never fails: ranks without a time are left out of the cross-section; invalid options
// (checked by ValidPeerOptions) classify nothing. Pure: no clocks, no I/O. Thread-safe.
#ifndef PEREGRINE_CONTROLLER_CORE_FAILSLOW_PEERS_H_
#define PEREGRINE_CONTROLLER_CORE_FAILSLOW_PEERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/job_state.h"
#include "diagnosis/peer_stragglers.h"

namespace peregrine {

struct PeerSlowdownOptions {
  // Job-wide when slow ranks > job_wide_fraction x ranks (0.5: a majority moves the median).
  double job_wide_fraction = 0.5;
  // min_workers, min_relative_scale, persistent_z, min_relative_excess are used.
  PeerStragglerOptions peer;
  // Whether DecideFailSlow counts persistent stragglers as slow ranks (opening a finding
  // without a change point and keeping it open). Off by default: each agent's iteration
  // mean covers its own heartbeat window, so one round's cross-section is not aligned by
  // step (a checkpoint step inside one agent's window makes its ranks look slow for one
  // round); when off, stragglers are named in the events and the finding's detail only.
  bool stragglers_are_slow = false;
};

// What the controller knows of one rank of the current attempt this round.
struct RankSlowdownInput {
  int rank = -1;
  bool slow = false;             // its agent reports a verified slowdown in force
  double severity = 0;           // that slowdown's severity
  double iteration_seconds = 0;  // its latest mean iteration time; <= 0: unknown
};

struct PeerSlowdownClassification {
  int ranks = 0;                 // ranks of the job (the denominator of the job-wide share)
  std::vector<int> slow_ranks;   // ascending
  bool job_wide = false;
  double median_severity = 0;    // of the slow ranks
  int timed_ranks = 0;           // ranks in the cross-section
  double median_seconds = 0;     // its median and robust standard deviation
  double scale_seconds = 0;
  std::vector<int> stragglers;   // ascending
  std::vector<double> straggler_z;       // per straggler
  std::vector<double> straggler_excess;  // per straggler: t / median - 1
  std::string detail;            // the figures, for events and the finding
};

// True when `options` are in range (job_wide_fraction in [0, 1), the peer options as
// AnalyzePeerStragglers checks them).
bool ValidPeerOptions(const PeerSlowdownOptions& options);

// `ranks_in_job` is the job's world size (at least the number of inputs is used).
PeerSlowdownClassification ClassifyRankSlowdowns(const std::vector<RankSlowdownInput>& ranks, int ranks_in_job,
                                                 const PeerSlowdownOptions& options = {});

// The inputs of the agents of the current attempt (connected, not standby, attempt ==
// `attempt` > 0): every rank with a fail-slow report or an iteration summary, then
// ClassifyRankSlowdowns with `ranks_in_job`.
PeerSlowdownClassification ClassifyAgentSlowdowns(const std::vector<AgentObservation>& agents, uint64_t attempt,
                                                  int ranks_in_job, const PeerSlowdownOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_FAILSLOW_PEERS_H_
