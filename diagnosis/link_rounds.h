// Link-validation rounds: split the links of a ring or a binary tree into a constant
// number of rounds of disjoint point-to-point transfers, so that every link is measured
// exactly once and a group of any size is validated in O(1) rounds; then judge the times.
//
// RingValidationRounds(n): links i -> (i + 1) mod n in 2 rounds (n even), 3 (n odd), none
// for n = 1. TreeValidationRounds(parents): a binary tree as a parent array, at most 4
// non-empty rounds; HeapBinaryTreeParents(n) builds the default heap-ordered tree (NCCL's
// double binary tree: pass each tree's parents). No rank is in two transfers of a round.
// JudgeLinkTimes: a link is slow above slow_ratio x the median time; a rank with >= 2
// measured links, all slow, is reported as a slow rank instead of its links. All fail with
// kInvalidArgument on invalid input. The round assignment is described in link_rounds.cc.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_LINK_ROUNDS_H_
#define PEREGRINE_DIAGNOSIS_LINK_ROUNDS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine {

struct LinkTransfer {
  int sender = 0;
  int receiver = 0;
  bool operator==(const LinkTransfer&) const = default;
};

// Rounds of transfers; all transfers of a round run at the same time.
using ValidationRounds = std::vector<std::vector<LinkTransfer>>;

// Fails with kInvalidArgument when n < 1.
absl::StatusOr<ValidationRounds> RingValidationRounds(int n);

enum class TreeDirection {
  kChildToParent,  // reduce phase
  kParentToChild,  // broadcast phase
};

// Fails with kInvalidArgument when `parents` is not a binary tree (no or several roots,
// a parent out of range, a cycle, more than two children).
absl::StatusOr<ValidationRounds> TreeValidationRounds(absl::Span<const int> parents,
                                                      TreeDirection direction);

// The heap-ordered binary tree over n >= 1 ranks: parents[0] = -1, parents[i] = (i-1)/2.
std::vector<int> HeapBinaryTreeParents(int n);

struct LinkTime {
  int sender = 0;
  int receiver = 0;
  double seconds = 0.0;
};

struct SlowLink {
  int sender = 0;
  int receiver = 0;
  double seconds = 0.0;
  double ratio = 0.0;  // seconds / median
};

struct SlowRank {
  int rank = 0;
  int links = 0;             // measured links touching the rank, all slow
  double mean_ratio = 0.0;   // mean of their time / median
};

struct LinkVerdict {
  double median_seconds = 0.0;
  std::vector<SlowRank> slow_ranks;  // slowest first
  std::vector<SlowLink> slow_links;  // slowest first, excluding links of slow ranks
};

// Fails with kInvalidArgument on an empty input, a negative or non-finite time, or
// slow_ratio <= 1.
absl::StatusOr<LinkVerdict> JudgeLinkTimes(absl::Span<const LinkTime> times,
                                           double slow_ratio = 1.1);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_LINK_ROUNDS_H_
