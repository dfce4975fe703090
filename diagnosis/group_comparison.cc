#include "diagnosis/group_comparison.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

// How groups are compared (Falcon section 4.3, "Profiling").
//
// Only durations are compared, never times taken on different hosts (their clocks differ
// by about a millisecond under NTP). For one collective whose member i spent d_i in it
// (d_i = exit_i - enter_i, both on member i's own clock: device events or host time):
//   transfer = min_i d_i      the last member to arrive barely waits: its time in the
//                             collective is the data movement itself
//   wait_i   = d_i - transfer idle time of member i, waiting for the last peer to arrive
//   the last arriver is the unique member with the minimum duration, and the delay it
//   alone imposed is (second-smallest duration) - transfer.
// Waiting is not the group's fault: it is caused by whoever arrives last. So:
//  - communication: the mean transfer time of a group is compared with the (lower) median
//    of the groups of the same kind; a group above slow_ratio (1.1) times it is suspicious.
//    Kinds with a single group cannot be compared and are skipped;
//  - compute: a slow rank arrives last in the collectives of EVERY group it belongs to,
//    while its victims, which inherit its delay and may arrive last in their other groups,
//    are on time in the group they share with it. A rank is a compute suspect when, in
//    each of its groups, it arrives last in at least min_late_fraction of the
//    collectives, and the mean delay it imposes per collective is at least
//    min_imposed_wait_fraction of the median transfer time over all collectives (so that
//    healthy jitter is not a suspect).
// Suspects are ranked: compute by mean imposed delay, communication by ratio.

namespace peregrine {
namespace {

double LowerMedian(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

absl::StatusOr<FailSlowSuspects> CompareGroups(absl::Span<const CollectiveTiming> collectives,
                                               const GroupComparisonOptions& options) {
  if (!(options.slow_ratio > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slow_ratio must be > 1, got %g", options.slow_ratio));
  }
  if (!(options.min_late_fraction > 0.0 && options.min_late_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_late_fraction must be in (0, 1], got %g", options.min_late_fraction));
  }
  if (!(options.min_imposed_wait_fraction >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_imposed_wait_fraction must be >= 0, got %g", options.min_imposed_wait_fraction));
  }
  using GroupKey = std::pair<int, int>;  // (kind, index)
  struct GroupAcc {
    int collectives = 0;
    double transfer_sum = 0.0;
    double wait_sum = 0.0;  // summed over members
    int member_samples = 0;
    std::set<int> ranks;
  };
  struct RankGroupAcc {
    int collectives = 0;
    int last = 0;
  };
  struct RankAcc {
    int collectives = 0;
    int last = 0;
    double imposed = 0.0;
    double own_wait = 0.0;
    std::map<GroupKey, RankGroupAcc> groups;
  };
  std::map<GroupKey, GroupAcc> groups;
  std::map<int, RankAcc> ranks;
  std::vector<double> transfers;
  transfers.reserve(collectives.size());

  for (size_t ci = 0; ci < collectives.size(); ++ci) {
    const CollectiveTiming& c = collectives[ci];
    if (c.members.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "collective %d of %s group %d has no members", ci, GroupKindName(c.kind),
          c.group_index));
    }
    std::set<int> seen;
    for (const MemberTiming& m : c.members) {
      if (m.exit_ns < m.enter_ns) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "collective %d: rank %d exits (%d ns) before it enters (%d ns)", ci, m.rank,
            m.exit_ns, m.enter_ns));
      }
      if (!seen.insert(m.rank).second) {
        return absl::InvalidArgumentError(
            absl::StrFormat("collective %d lists rank %d twice", ci, m.rank));
      }
    }
    // The member with the shortest stay arrived last; its stay is the transfer.
    int64_t shortest = INT64_MAX;
    for (const MemberTiming& m : c.members) shortest = std::min(shortest, m.exit_ns - m.enter_ns);
    int last_rank = -1;
    int64_t second = INT64_MAX;
    int at_shortest = 0;
    for (const MemberTiming& m : c.members) {
      const int64_t d = m.exit_ns - m.enter_ns;
      if (d == shortest) {
        ++at_shortest;
        last_rank = m.rank;
      } else {
        second = std::min(second, d);
      }
    }
    if (at_shortest != 1 || c.members.size() < 2) last_rank = -1;
    const double transfer = static_cast<double>(shortest);
    transfers.push_back(transfer);
    const GroupKey key{static_cast<int>(c.kind), c.group_index};
    GroupAcc& g = groups[key];
    ++g.collectives;
    g.transfer_sum += transfer;
    for (const MemberTiming& m : c.members) {
      const double wait = static_cast<double>(m.exit_ns - m.enter_ns - shortest);
      g.wait_sum += wait;
      ++g.member_samples;
      g.ranks.insert(m.rank);
      RankAcc& r = ranks[m.rank];
      ++r.collectives;
      r.own_wait += wait;
      RankGroupAcc& rg = r.groups[key];
      ++rg.collectives;
      if (m.rank == last_rank) {
        ++r.last;
        ++rg.last;
        r.imposed += static_cast<double>(second - shortest);
      }
    }
  }

  FailSlowSuspects out;
  if (transfers.empty()) return out;
  out.median_transfer_ns = LowerMedian(transfers);

  // Communication: compare groups of the same kind.
  std::map<int, std::vector<double>> by_kind;
  for (const auto& [key, g] : groups) by_kind[key.first].push_back(g.transfer_sum / g.collectives);
  for (const auto& [key, g] : groups) {
    const std::vector<double>& peers = by_kind[key.first];
    if (peers.size() < 2) continue;
    const double median = LowerMedian(peers);
    const double mean = g.transfer_sum / g.collectives;
    const bool slow = median > 0.0 ? mean > options.slow_ratio * median : mean > 0.0;
    if (!slow) continue;
    CommunicationSuspect s;
    s.kind = static_cast<GroupKind>(key.first);
    s.group_index = key.second;
    s.collectives = g.collectives;
    s.mean_transfer_ns = mean;
    s.median_of_kind_ns = median;
    s.ratio = median > 0.0 ? mean / median : INFINITY;
    s.mean_wait_ns = g.wait_sum / g.member_samples;
    s.ranks.assign(g.ranks.begin(), g.ranks.end());
    out.communication.push_back(std::move(s));
  }
  std::sort(out.communication.begin(), out.communication.end(),
            [](const CommunicationSuspect& a, const CommunicationSuspect& b) {
              return std::tie(b.ratio, a.kind, a.group_index) <
                     std::tie(a.ratio, b.kind, b.group_index);
            });

  // Compute: late in every group, imposing a delay that matters.
  const double min_imposed = options.min_imposed_wait_fraction * out.median_transfer_ns;
  for (const auto& [rank, r] : ranks) {
    double min_late = 1.0;
    for (const auto& [key, rg] : r.groups) {
      min_late = std::min(min_late, static_cast<double>(rg.last) / rg.collectives);
    }
    const double mean_imposed = r.imposed / r.collectives;
    if (min_late < options.min_late_fraction || mean_imposed <= 0.0 ||
        mean_imposed < min_imposed) {
      continue;
    }
    ComputeSuspect s;
    s.rank = rank;
    s.collectives = r.collectives;
    s.min_late_fraction = min_late;
    s.late_fraction = static_cast<double>(r.last) / r.collectives;
    s.mean_imposed_wait_ns = mean_imposed;
    s.mean_own_wait_ns = r.own_wait / r.collectives;
    out.compute.push_back(s);
  }
  std::sort(out.compute.begin(), out.compute.end(),
            [](const ComputeSuspect& a, const ComputeSuspect& b) {
              return std::tie(b.mean_imposed_wait_ns, a.rank) <
                     std::tie(a.mean_imposed_wait_ns, b.rank);
            });
  return out;
}

}  // namespace peregrine
