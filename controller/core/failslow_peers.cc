#include "controller/core/failslow_peers.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

// Why these two questions, and what the controller can and cannot see.
//
// Offline (AnalyzePeerStragglers) every step is normalised across the workers, so a change
// all workers share lands in the per-step median and in no worker's series. Online the
// controller holds, per rank, its agent's verdict on the rank's own iteration times (a
// verified slowdown and its severity, FailSlowDetector in the agent) and the latest
// heartbeat's mean iteration time; no per-step history aligned across ranks reaches it.
// So the same two rules are applied to what it has:
//  - a slowdown is job-wide when more than half of the ranks report one at once: the
//    median across ranks moved, exactly the condition under which the offline
//    normalisation reports the change once for the job instead of per worker;
//  - a rank is a persistent straggler when its latest iteration time is beyond
//    persistent_z robust standard deviations AND min_relative_excess over the ranks'
//    median (SpreadOf / IsPersistentStraggler: the offline rule on one cross-section; the
//    heartbeat mean is already an average over that heartbeat's steps, where offline the
//    median over all steps is used).

namespace peregrine {

bool ValidPeerOptions(const PeerSlowdownOptions& o) {
  return o.job_wide_fraction >= 0 && o.job_wide_fraction < 1 && o.peer.min_workers >= 3 &&
         o.peer.min_relative_scale >= 0 && o.peer.min_relative_scale < 1 && o.peer.persistent_z > 0 &&
         std::isfinite(o.peer.persistent_z) && o.peer.min_relative_excess >= 0 &&
         std::isfinite(o.peer.min_relative_excess);
}

PeerSlowdownClassification ClassifyRankSlowdowns(const std::vector<RankSlowdownInput>& ranks, int ranks_in_job,
                                                 const PeerSlowdownOptions& options) {
  PeerSlowdownClassification c;
  c.ranks = std::max(ranks_in_job, static_cast<int>(ranks.size()));
  if (!ValidPeerOptions(options)) return c;
  std::vector<double> severities, times;
  for (const RankSlowdownInput& r : ranks) {
    if (r.slow) {
      c.slow_ranks.push_back(r.rank);
      severities.push_back(r.severity);
    }
    times.push_back(r.iteration_seconds > 0 && std::isfinite(r.iteration_seconds) ? r.iteration_seconds : NAN);
  }
  std::sort(c.slow_ranks.begin(), c.slow_ranks.end());
  std::vector<std::string> parts;
  if (!severities.empty()) {
    c.median_severity = SpreadOf(severities, 0).median;
    c.job_wide = c.ranks >= options.peer.min_workers &&
                 static_cast<double>(c.slow_ranks.size()) > options.job_wide_fraction * c.ranks;
    if (c.job_wide) {
      parts.push_back(absl::StrFormat("job-wide: %d of %d ranks slowed together (median %+.0f%%)",
                                      static_cast<int>(c.slow_ranks.size()), c.ranks, 100 * c.median_severity));
    }
  }
  const PeerSpread spread = SpreadOf(times, options.peer.min_relative_scale);
  c.timed_ranks = spread.workers;
  c.median_seconds = spread.median;
  c.scale_seconds = spread.scale;
  if (spread.workers >= options.peer.min_workers && spread.median > 0 && spread.scale > 0) {
    std::vector<size_t> by_rank(ranks.size());
    for (size_t i = 0; i < by_rank.size(); ++i) by_rank[i] = i;
    std::sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) { return ranks[a].rank < ranks[b].rank; });
    for (size_t i : by_rank) {
      if (!std::isfinite(times[i])) continue;
      const double z = (times[i] - spread.median) / spread.scale;
      const double excess = times[i] / spread.median - 1;
      if (!IsPersistentStraggler(z, excess, options.peer)) continue;
      c.stragglers.push_back(ranks[i].rank);
      c.straggler_z.push_back(z);
      c.straggler_excess.push_back(excess);
      parts.push_back(absl::StrFormat("rank %d: iteration %.1f ms = %+.0f%% over the ranks' median %.1f ms "
                                      "(%.1f robust SD; rule: > %.1f SD and > %.0f%%)",
                                      ranks[i].rank, times[i] * 1e3, 100 * excess, spread.median * 1e3, z,
                                      options.peer.persistent_z, 100 * options.peer.min_relative_excess));
    }
  }
  c.detail = absl::StrJoin(parts, "; ");
  return c;
}

PeerSlowdownClassification ClassifyAgentSlowdowns(const std::vector<AgentObservation>& agents, uint64_t attempt,
                                                  int ranks_in_job, const PeerSlowdownOptions& options) {
  std::map<int, RankSlowdownInput> by_rank;
  for (const AgentObservation& a : agents) {
    if (!a.connected || a.registered_as_standby || attempt == 0 || a.attempt != attempt) continue;
    for (const auto& [rank, fs] : a.fail_slow) {
      RankSlowdownInput& r = by_rank[rank];
      r.rank = rank;
      r.slow = fs.slow;
      r.severity = fs.severity;
    }
    for (const auto& [rank, it] : a.rank_iterations) {
      RankSlowdownInput& r = by_rank[rank];
      r.rank = rank;
      r.iteration_seconds = it.mean_iteration_seconds;
    }
  }
  std::vector<RankSlowdownInput> ranks;
  for (const auto& [rank, r] : by_rank) ranks.push_back(r);
  return ClassifyRankSlowdowns(ranks, ranks_in_job, options);
}

}  // namespace peregrine
