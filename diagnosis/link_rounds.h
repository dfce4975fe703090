// Link-validation rounds (Falcon section 4.3, Figure 9): split the links of a ring or a
// binary tree into a constant number of rounds of disjoint point-to-point transfers, so
// that every link is measured once and a whole group is validated in O(1) rounds whatever
// its size; then judge the measured per-link times.
//
// Ring of n ranks: links i -> (i + 1) mod n.
//  - n even (n >= 2): round 0 sends from even ranks (0->1, 2->3, ...), round 1 from odd
//    ranks (1->2, ..., (n-1)->0). For n = 2 the two links are 0->1 and 1->0.
//  - n odd (n >= 3): round 0: 0->1, 2->3, ..., (n-3)->(n-2); round 1: 1->2, 3->4, ...,
//    (n-2)->(n-1); round 2: (n-1)->0.
//  - n = 1: no links, no rounds.
//
// Tree: any binary tree given as a parent array (parent[root] = -1, exactly one root, at
// most two children per rank). A rank's children are ordered by rank: the smaller is the
// "left" child, the larger the "right" one. Following Falcon, the edges fall into four
// rounds by (depth parity of the child, left/right): round 0: left children at even depth,
// round 1: right children at even depth, round 2: left children at odd depth, round 3:
// right children at odd depth. Within a round every receiver gets at most one transfer
// (a rank has one left and one right child) and senders and receivers lie at depths of
// different parity, so no rank is in two transfers. Empty rounds are omitted, so n = 1
// gives none and n = 2 one.
// HeapBinaryTreeParents(n) builds the heap-ordered tree used by default: the parent of
// rank i > 0 is (i - 1) / 2 (children 2i+1 and 2i+2). NCCL's double binary tree can be
// validated by passing each of its two trees' parent arrays.
//
// Judging: with `median` the median of all measured link times in a round set, a link is
// slow when its time exceeds slow_ratio (1.1) times the median. A rank with at least two
// measured links, all slow, is reported as a slow rank (the GPU or its host is the common
// cause) and its links are not reported separately; the remaining slow links are reported
// as links.
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
