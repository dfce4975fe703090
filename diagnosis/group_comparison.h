// Cross-group comparison (Falcon's "Profiling" step): from per-member timings of the
// collectives of every communication group, name the suspects of a fail-slow - slow
// compute ranks and slow (congested) communication groups - with the numbers behind each.
//
// CompareGroups compares only durations (exit - enter on each member's own clock), never
// times taken on different hosts. A group is a communication suspect when its mean
// transfer time exceeds slow_ratio x the median of its kind; a rank is a compute suspect
// when it arrives last in every group it belongs to and imposes enough delay. Suspects
// are ranked (compute by imposed delay, communication by ratio). Fails with
// kInvalidArgument on malformed timings or options. The definitions are in
// group_comparison.cc.
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
