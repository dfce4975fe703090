// Cross-group comparison (Falcon section 4.3, "Profiling"): from per-member timings of the
// collectives of every communication group, name the suspects of a fail-slow - slow
// compute ranks and slow (congested) communication groups - with the numbers behind each.
//
// For one collective with members entering at e_i and the collective completing at
// c = max(exit_i):
//   wait_i   = max(e) - e_i   idle time of member i, waiting for the last peer to arrive
//   transfer = c - max(e)     time the data movement took once everyone was there
// Waiting is not the group's fault: it is caused by whoever arrives last. So:
//  - communication: the mean transfer time of a group is compared with the (lower) median
//    of the groups of the same kind; a group above slow_ratio (1.1) times it is suspicious.
//    Kinds with a single group cannot be compared and are skipped;
//  - compute: a rank "arrives last" in a collective when it enters strictly after every
//    other member; the delay it alone imposes is max(e) - (second-largest e). A slow rank
//    arrives last in the collectives of EVERY group it belongs to, while its victims, which
//    inherit its delay and may arrive last in their other groups, are on time in the group
//    they share with it. A rank is a compute suspect when, in each of its groups, it
//    arrives last in at least min_late_fraction of the collectives, and the mean delay it
//    imposes per collective is at least min_imposed_wait_fraction of the median transfer
//    time over all collectives (so that healthy jitter is not a suspect).
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

struct MemberTiming {
  int rank = 0;
  int64_t enter_ns = 0;  // the member's collective started (CUDA event before the call)
  int64_t exit_ns = 0;   // the member's collective finished (CUDA event after the call)
};

// One collective (or one point-to-point exchange) of one communication group.
struct CollectiveTiming {
  GroupKind kind = GroupKind::kData;
  int group_index = 0;
  std::vector<MemberTiming> members;
};

struct GroupComparisonOptions {
  double slow_ratio = 1.1;                // Falcon: 1.1 x median
  double min_late_fraction = 0.8;  // well above the 1/2 a member of a pair gets by chance
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
