// Cross-group comparison (Falcon section 4.3, "Profiling"): from per-member timings of the
// collectives of every communication group, name the suspects of a fail-slow - slow
// compute ranks and slow (congested) communication groups - with the numbers behind each.
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
//
// Pure function; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_GROUP_COMPARISON_H_
#define PEREGRINE_DIAGNOSIS_GROUP_COMPARISON_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

// enter_ns and exit_ns are on the member's own clock; only exit_ns - enter_ns is used.
struct MemberTiming {
  int rank = 0;
  int64_t enter_ns = 0;  // the member's collective started (CUDA event / host entry)
  int64_t exit_ns = 0;   // the member's collective finished (CUDA event / host exit)
};

// One collective (or one point-to-point exchange) of one communication group.
struct CollectiveTiming {
  GroupKind kind = GroupKind::kData;
  int group_index = 0;
  std::vector<MemberTiming> members;
};

struct GroupComparisonOptions {
  double slow_ratio = 1.1;                // Falcon: 1.1 x median
  // Well above the 1/2 a member of a pair gets by chance, and below the (2m-1)/2m of a slow
  // pipeline rank whose upstream stage is itself delayed once per iteration (e.g. by a
  // congested data-parallel link): with m = 2 micro-batches that rank is last in 3 of its 4
  // pipeline exchanges per iteration, 0.75.
  double min_late_fraction = 0.7;
  double min_imposed_wait_fraction = 0.1;
};

struct ComputeSuspect {
  int rank = 0;
  int collectives = 0;             // collectives the rank took part in
  double min_late_fraction = 0.0;  // over its groups, the lowest fraction arriving last
  double late_fraction = 0.0;      // over all its collectives
  double mean_imposed_wait_ns = 0.0;
  double mean_own_wait_ns = 0.0;   // the rank's own idle time per collective (small)
};

struct CommunicationSuspect {
  GroupKind kind = GroupKind::kData;
  int group_index = 0;
  int collectives = 0;
  double mean_transfer_ns = 0.0;
  double median_of_kind_ns = 0.0;  // lower median over the groups of this kind
  double ratio = 0.0;              // mean_transfer_ns / median_of_kind_ns
  double mean_wait_ns = 0.0;       // mean idle time of its members per collective
  std::vector<int> ranks;          // members seen, ascending
};

struct FailSlowSuspects {
  std::vector<ComputeSuspect> compute;              // most imposed delay first
  std::vector<CommunicationSuspect> communication;  // highest ratio first
  double median_transfer_ns = 0.0;                  // over all collectives
};

// Fails with kInvalidArgument for a collective with no members, a rank listed twice in
// one collective, exit before enter, or options out of range.
absl::StatusOr<FailSlowSuspects> CompareGroups(absl::Span<const CollectiveTiming> collectives,
                                               const GroupComparisonOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_GROUP_COMPARISON_H_
