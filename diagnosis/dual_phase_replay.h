// Dual-phase replay planner (ByteRobust section 4.2, Algorithm 1): locate a single faulty
// machine (typically silent data corruption) by replaying the job, with fewer layers and
// a smaller DP size but the original TP and PP, on groups of machines, twice.
//
// Model. A replay group is a fresh, smaller job with the original TP and PP, so any set of
// machines whose GPU count is a multiple of TP x PP x dp_unit forms one, where dp_unit is
// the smallest DP size that fills whole machines (gpus_per_machine / gcd(gpus_per_machine,
// TP x PP)). Such a block of w = TP x PP x dp_unit / gpus_per_machine machines is a "unit"
// (w = PP when one machine holds one TP group, as in the paper); the job has U = DP /
// dp_unit units.
//   Phase 1 (horizontal): m = U / n groups of k = n x w machines; where the original
//     layout allows it each group is n whole original DP units (the replicas keep their
//     own machines and stage order), otherwise k consecutive machines.
//   Phase 2 (vertical): machines are numbered by (position inside their horizontal group,
//     horizontal group) and cut, in that order, into groups of v machines, v the largest
//     multiple of w not above m. Every vertical group therefore takes at most one machine
//     from each horizontal group, so a failing horizontal group and a failing vertical
//     group intersect in exactly one machine. This needs m >= w (the paper's condition
//     n <= m is the same idea for w = PP).
// n is chosen (unless given) to make the smaller of the two phases' groups as large as
// possible (the replay stays representative), preferring larger n on ties.
//
// Pure functions; thread-compatible values.
#ifndef PEREGRINE_DIAGNOSIS_DUAL_PHASE_REPLAY_H_
#define PEREGRINE_DIAGNOSIS_DUAL_PHASE_REPLAY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

struct ReplayGroup {
  int index = 0;
  // Machine indices of the original job, in replay order: the j-th machine holds ranks
  // [j x gpus_per_machine, (j+1) x gpus_per_machine) of the replay job.
  std::vector<int> machines;
  int replay_dp = 0;  // DP size of the replay job; TP and PP are the original ones
};

struct DualPhaseReplayOptions {
  int n = 0;       // units per horizontal group; 0 chooses automatically
  int layers = 0;  // model layers for the replay jobs; 0 means one layer per stage (PP)
};

struct DualPhaseReplayPlan {
  int n = 0;  // units per horizontal group
  int m = 0;  // number of horizontal groups (U / n)
  int machines_per_unit = 0;  // w
  int layers = 0;
  std::vector<ReplayGroup> horizontal;  // phase 1: a partition of all machines
  std::vector<ReplayGroup> vertical;    // phase 2: a partition of all machines
  std::string DebugString() const;
};

// Plans both phases. Fails with kInvalidArgument when options.n is negative, does not
// divide the number of units U or leaves m < w, or options.layers is negative; with
// kFailedPrecondition when no n works (U < w: too few DP replicas to tell machines apart).
absl::StatusOr<DualPhaseReplayPlan> PlanDualPhaseReplay(const ParallelLayout& layout,
                                                        const DualPhaseReplayOptions& options = {});

// The unique machine in both the failing horizontal and the failing vertical group.
// Fails with kFailedPrecondition, explaining, when a phase has no failing group (the fault
// did not reproduce) or several (more than one faulty machine, or a fault that is not one
// machine's), and with kInvalidArgument for an unknown group index.
absl::StatusOr<int> LocateFaultyMachine(const DualPhaseReplayPlan& plan,
                                        absl::Span<const int> failed_horizontal,
                                        absl::Span<const int> failed_vertical);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_DUAL_PHASE_REPLAY_H_
