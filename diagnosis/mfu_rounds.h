// MFU-drop rounds (ByteRobust section 5.1, "handling fail-slow"): when MFU drops, stack
// aggregation is repeated every round (10 s by default, driven by the caller); each round
// flags the parallel group holding the most outliers, and after `rounds` rounds (5) the
// group flagged most often is the degrader and is over-evicted.
//
// "Most outliers" is counted in machines, since eviction is per machine: a group's score
// is the number of suspect machines among its machines. Ties go to the group with fewer
// machines (the more specific), then TP < PP < DP, then the lower index. Verdict ties
// (equal flag counts) go to the group that was flagged in the latest round among them,
// then the same kind/index order, so the outcome never depends on container order.
//
// Pure: no clock. MfuDropRounds is a small state machine; thread-compatible.
#ifndef PEREGRINE_DIAGNOSIS_MFU_ROUNDS_H_
#define PEREGRINE_DIAGNOSIS_MFU_ROUNDS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

struct FlaggedGroup {
  GroupKind kind = GroupKind::kTensor;
  int index = 0;
  bool operator==(const FlaggedGroup&) const = default;
};

// The group with the most suspect machines, or nullopt when there are no suspects.
// PEREGRINE_CHECKs that ranks are in range.
std::optional<FlaggedGroup> GroupWithMostOutliers(const ParallelLayout& layout,
                                                  absl::Span<const int> suspect_ranks);

struct MfuVerdict {
  std::optional<FlaggedGroup> group;  // empty when no round flagged anything
  int flags = 0;                      // rounds that flagged `group`
  std::vector<int> machines_to_evict;  // ascending
  std::string explanation;
};

class MfuDropRounds {
 public:
  static constexpr int kDefaultRounds = 5;
  explicit MfuDropRounds(ParallelLayout layout, int rounds = kDefaultRounds);

  // Records one round: the group flagged by that round's aggregation, or nullopt when the
  // round found no outliers (it still counts as a round).
  void RecordRound(std::optional<FlaggedGroup> flagged);
  // Convenience: RecordRound(GroupWithMostOutliers(layout, suspect_ranks)).
  void RecordSuspects(absl::Span<const int> suspect_ranks);

  int rounds_recorded() const { return static_cast<int>(history_.size()); }
  bool complete() const { return rounds_recorded() >= rounds_; }

  // nullopt until `rounds` rounds are recorded; then the verdict over the last `rounds`.
  std::optional<MfuVerdict> Decide() const;

  // Starts a new series (after an eviction, or when MFU recovers).
  void Reset() { history_.clear(); }

 private:
  ParallelLayout layout_;
  int rounds_;
  std::vector<std::optional<FlaggedGroup>> history_;
};

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_MFU_ROUNDS_H_
