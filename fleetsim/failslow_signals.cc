#include "fleetsim/failslow_signals.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

// How the profiles are synthesised. Each communicator of size >= 2 (TP inside a machine,
// PP and DP across machines) gets `collectives` collectives (TP and DP: all_reduce; PP:
// send/recv between adjacent stages, each direction, enough exchanges that every pipeline
// group has at least `collectives` pairs). For one collective every member arrives at
//   arrival_i = lateness_i + jitter_i
// (jitter: a deterministic hash of rank, kind and sequence, below jitter_fraction x step;
// lateness in TP and PP: a slow GPU's rank severity x step / sync_points; in DP: the
// replica's step compute over the fastest replica's, (factor_r - min factor) x step, since
// the gradient all-reduce waits once per step for the slowest replica, whose pipeline runs
// at its slowest stage's pace) and every member leaves when the last one has arrived and
// the transfer is done:
//   duration_i = max_j arrival_j - arrival_i + transfer
// transfer = the kind's fraction of the step, plus, for a DP group with a member on a
// congested machine, that machine's link severity x step (the job's whole slowdown shows
// in its gradient all-reduce). So the slow rank has the shortest stay (it arrives last) in
// every group it is in, and a congested group's shortest stay (its transfer) is longer
// than the median of its kind: what CompareGroups (diagnosis/group_comparison.h) reads.
// Clocks: enter = sequence x the job's step + arrival on each member's own clock; only
// durations (and, for S2's measure of each replica's waiting share, the span of the DP
// collectives) are read by the core: a replica's busy time per step comes out as
// factor_r x step, what MeasureReplicaSpeeds (microbatch_mitigation.h) turns into its time
// per micro-batch.

namespace peregrine::fleetsim {
namespace {

constexpr GroupKind kKinds[] = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double TransferFraction(GroupKind kind, const FailSlowSignalOptions& o) {
  switch (kind) {
    case GroupKind::kTensor: return o.tp_transfer_fraction;
    case GroupKind::kPipeline: return o.pp_transfer_fraction;
    case GroupKind::kData: return o.dp_transfer_fraction;
  }
  return o.dp_transfer_fraction;
}

}  // namespace

double TrackingLatencySeconds(const FailSlowSignalOptions& options, double step_s, double slowdown) {
  return options.verify_iterations * step_s * (1 + std::max(0.0, slowdown)) + options.heartbeat_s;
}

std::vector<double> ReplicaStepFactors(const ParallelLayout& layout, const std::vector<SlotSlowState>& slots,
                                       const std::vector<uint32_t>& micro_batches,
                                       const FailSlowSignalOptions& options) {
  const int n = layout.data();
  std::vector<double> slow(static_cast<size_t>(n), 0.0);
  const int machines = std::min(layout.machines(), static_cast<int>(slots.size()));
  for (int m = 0; m < machines; ++m) {
    if (slots[static_cast<size_t>(m)].compute <= 0) continue;
    for (int r : layout.RanksOfMachine(m)) {
      double& s = slow[static_cast<size_t>(layout.Coordinates(r).dp)];
      s = std::max(s, slots[static_cast<size_t>(m)].compute);
    }
  }
  const bool plan = static_cast<int>(micro_batches.size()) == n;
  double mean = options.micro_batches;
  if (plan) {
    double sum = 0;
    for (uint32_t c : micro_batches) sum += c;
    mean = sum / n;
  }
  std::vector<double> factors(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    const double share = plan && mean > 0 ? micro_batches[static_cast<size_t>(d)] / mean : 1.0;
    factors[static_cast<size_t>(d)] = share * (1 + slow[static_cast<size_t>(d)]);
  }
  return factors;
}

double JobSlowdown(const std::vector<double>& replica_factors, const std::vector<SlotSlowState>& slots) {
  double worst = 1;
  for (double f : replica_factors) worst = std::max(worst, f);
  double link = 0;
  for (const SlotSlowState& s : slots) link = std::max(link, s.link);
  return std::max(worst - 1, link);
}

std::vector<std::vector<CommProfileObservation>> SynthesizeCommProfiles(const ParallelLayout& layout,
                                                                        const std::vector<SlotSlowState>& slots,
                                                                        const std::vector<uint32_t>& micro_batches,
                                                                        double step_s,
                                                                        const FailSlowSignalOptions& options) {
  const int machines = layout.machines();
  const int gpus = layout.gpus_per_machine();
  std::vector<std::vector<CommProfileObservation>> out(static_cast<size_t>(machines));
  if (static_cast<int>(slots.size()) != machines) return out;
  std::vector<GroupKind> kinds;
  for (GroupKind k : kKinds) {
    if (layout.GroupSize(k) >= 2) kinds.push_back(k);
  }
  const size_t nk = kinds.size();
  for (auto& slot : out) slot.resize(static_cast<size_t>(gpus) * nk);
  const double step_ns = step_s * 1e9;
  const int n = std::max(1, options.collectives);
  const double jitter_ns = options.jitter_fraction * step_ns;
  const std::vector<double> factors = ReplicaStepFactors(layout, slots, micro_batches, options);
  const double fastest = *std::min_element(factors.begin(), factors.end());
  // One step of the job: the slowest replica, or a congested link if slower.
  const double job_step_ns = (1 + JobSlowdown(factors, slots)) * step_ns;

  auto lateness = [&](int rank, GroupKind kind) {
    if (kind == GroupKind::kData) return (factors[static_cast<size_t>(layout.Coordinates(rank).dp)] - fastest) * step_ns;
    const SlotSlowState& s = slots[static_cast<size_t>(layout.MachineOf(rank))];
    if (s.compute <= 0 || s.slow_gpu < 0 || layout.LocalRank(rank) != s.slow_gpu) return 0.0;
    return s.compute * step_ns / std::max(1, options.sync_points);
  };
  auto jitter = [&](int rank, size_t kpos, uint64_t seq) {
    const uint64_t h = Mix((static_cast<uint64_t>(rank) << 24) ^ (static_cast<uint64_t>(kpos) << 20) ^ seq);
    return jitter_ns * static_cast<double>(h >> 11) / 9007199254740992.0;
  };
  auto profile = [&](int rank, size_t kpos) -> CommProfileObservation& {
    return out[static_cast<size_t>(layout.MachineOf(rank))][static_cast<size_t>(layout.LocalRank(rank)) * nk + kpos];
  };

  for (size_t kpos = 0; kpos < nk; ++kpos) {
    const GroupKind kind = kinds[kpos];
    for (const CommGroup& g : layout.Groups(kind)) {
      const int size = static_cast<int>(g.ranks.size());
      double transfer = TransferFraction(kind, options) * step_ns;
      if (kind == GroupKind::kData) {
        double link = 0;
        for (int r : g.ranks) link = std::max(link, slots[static_cast<size_t>(layout.MachineOf(r))].link);
        transfer += link * step_ns;
      }
      const uint64_t comm_id = (static_cast<uint64_t>(static_cast<int>(kind) + 1) << 32) | static_cast<uint64_t>(g.index + 1);
      for (int i = 0; i < size; ++i) {
        CommProfileObservation& p = profile(g.ranks[static_cast<size_t>(i)], kpos);
        p.comm_id = comm_id;
        p.global_rank = g.ranks[static_cast<size_t>(i)];
        p.rank_in_comm = i;
        p.comm_size = size;
      }
      std::vector<double> late(static_cast<size_t>(size));
      for (int i = 0; i < size; ++i) late[static_cast<size_t>(i)] = lateness(g.ranks[static_cast<size_t>(i)], kind);
      if (kind != GroupKind::kPipeline) {
        std::vector<double> arrival(static_cast<size_t>(size));
        for (int seq = 0; seq < n; ++seq) {
          double last = 0;
          for (int i = 0; i < size; ++i) {
            arrival[static_cast<size_t>(i)] =
                late[static_cast<size_t>(i)] + jitter(g.ranks[static_cast<size_t>(i)], kpos, static_cast<uint64_t>(seq));
            last = std::max(last, arrival[static_cast<size_t>(i)]);
          }
          for (int i = 0; i < size; ++i) {
            const double a = arrival[static_cast<size_t>(i)];
            CollectiveObservation c;
            c.sequence = static_cast<uint64_t>(seq);
            c.op = "all_reduce";
            c.enter = static_cast<int64_t>(std::llround(seq * job_step_ns + a));
            c.exit = c.enter + static_cast<int64_t>(std::llround(last - a + transfer));
            profile(g.ranks[static_cast<size_t>(i)], kpos).collectives.push_back(std::move(c));
          }
        }
        continue;
      }
      // Pipeline: each adjacent pair exchanges forward (i -> i+1) and backward (i+1 -> i).
      const int exchanges = std::max(1, (n + 2 * (size - 1) - 1) / (2 * (size - 1)));
      for (int i = 0; i + 1 < size; ++i) {
        for (int dir = 0; dir < 2; ++dir) {
          const int s = dir == 0 ? i : i + 1;
          const int d = dir == 0 ? i + 1 : i;
          const int sr = g.ranks[static_cast<size_t>(s)];
          const int dr = g.ranks[static_cast<size_t>(d)];
          for (int k = 0; k < exchanges; ++k) {
            const uint64_t seq_key = static_cast<uint64_t>(k) * 2 + static_cast<uint64_t>(dir);
            const double as = late[static_cast<size_t>(s)] + jitter(sr, kpos, seq_key);
            const double ad = late[static_cast<size_t>(d)] + jitter(dr, kpos, seq_key + 1000);
            const double last = std::max(as, ad);
            const double base = (2 * k + dir) * job_step_ns;
            CollectiveObservation send;
            send.sequence = static_cast<uint64_t>(k);
            send.op = "send";
            send.peer = d;
            send.enter = static_cast<int64_t>(std::llround(base + as));
            send.exit = send.enter + static_cast<int64_t>(std::llround(last - as + transfer));
            profile(sr, kpos).collectives.push_back(std::move(send));
            CollectiveObservation recv;
            recv.sequence = static_cast<uint64_t>(k);
            recv.op = "recv";
            recv.peer = s;
            recv.enter = static_cast<int64_t>(std::llround(base + ad));
            recv.exit = recv.enter + static_cast<int64_t>(std::llround(last - ad + transfer));
            profile(dr, kpos).collectives.push_back(std::move(recv));
          }
        }
      }
    }
  }
  return out;
}

DiagnosticOutcome SimulatedGemm(const SlotSlowState& slot, int gpus_per_machine, const FailSlowSignalOptions& options) {
  DiagnosticOutcome o;
  o.kind = "gemm";
  o.passed = true;
  o.seconds = options.gemm_s;
  for (int i = 0; i < gpus_per_machine; ++i) {
    const double slow = i == slot.slow_gpu ? slot.compute : 0;
    o.figures[absl::StrCat("gpu", i, "_tflops")] = options.gemm_tflops / (1 + slow);
  }
  o.detail = "simulated GEMM (oracle of the fault list)";
  return o;
}

const std::vector<std::pair<int, int>>& LinkRoundsCache::Links(const std::string& rounds) {
  if (parsed_ && rounds == text_) return links_;
  text_ = rounds;
  parsed_ = true;
  links_.clear();
  for (absl::string_view round : absl::StrSplit(rounds, ';', absl::SkipEmpty())) {
    const size_t colon = round.find(':');
    if (colon != absl::string_view::npos) round.remove_prefix(colon + 1);
    for (absl::string_view pair : absl::StrSplit(round, ',', absl::SkipEmpty())) {
      const size_t gt = pair.find('>');
      int s = 0, d = 0;
      if (gt == absl::string_view::npos || !absl::SimpleAtoi(pair.substr(0, gt), &s) ||
          !absl::SimpleAtoi(pair.substr(gt + 1), &d)) {
        continue;
      }
      links_.emplace_back(s, d);
    }
  }
  std::sort(links_.begin(), links_.end());  // by sender: each machine reads its own range
  return links_;
}

DiagnosticOutcome SimulatedLinkRounds(const ParallelLayout& layout, int slot, const std::vector<SlotSlowState>& slots,
                                      const std::vector<std::pair<int, int>>& links,
                                      const FailSlowSignalOptions& options) {
  DiagnosticOutcome o;
  o.kind = "p2p_rounds";
  o.passed = true;
  o.seconds = options.links_s;
  o.detail = "simulated link rounds (oracle of the fault list)";
  const int world = layout.world_size();
  if (slot < 0 || slot >= layout.machines() || static_cast<int>(slots.size()) != layout.machines()) return o;
  const int gpus = layout.gpus_per_machine();
  auto it = std::lower_bound(links.begin(), links.end(), std::make_pair(slot * gpus, -1));
  for (; it != links.end() && it->first < (slot + 1) * gpus; ++it) {
    const auto& [s, d] = *it;
    if (d < 0 || d >= world) continue;
    const int dm = layout.MachineOf(d);
    double rate = options.intra_link_gbps;
    if (dm != slot) {
      const double congestion = std::max(slots[static_cast<size_t>(slot)].link, slots[static_cast<size_t>(dm)].link);
      rate = options.inter_link_gbps / (1 + congestion / std::max(1e-9, options.dp_transfer_fraction));
    }
    o.figures[absl::StrCat("link_", s, "_", d, "_gbps")] = rate;
  }
  return o;
}

}  // namespace peregrine::fleetsim
