#include "diagnosis/link_rounds.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

// How links are split into rounds (Falcon section 4.3, Figure 9) and judged.
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

namespace peregrine {

absl::StatusOr<ValidationRounds> RingValidationRounds(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("ring size must be >= 1, got %d", n));
  }
  ValidationRounds rounds;
  if (n == 1) return rounds;
  if (n % 2 == 0) {
    rounds.resize(2);
    for (int i = 0; i < n; ++i) rounds[static_cast<size_t>(i % 2)].push_back({i, (i + 1) % n});
    return rounds;
  }
  rounds.resize(3);
  for (int i = 0; i + 1 < n; ++i) rounds[static_cast<size_t>(i % 2)].push_back({i, i + 1});
  rounds[2].push_back({n - 1, 0});
  return rounds;
}

std::vector<int> HeapBinaryTreeParents(int n) {
  std::vector<int> parents(static_cast<size_t>(std::max(n, 0)));
  for (int i = 0; i < n; ++i) parents[static_cast<size_t>(i)] = i == 0 ? -1 : (i - 1) / 2;
  return parents;
}

absl::StatusOr<ValidationRounds> TreeValidationRounds(absl::Span<const int> parents,
                                                      TreeDirection direction) {
  const int n = static_cast<int>(parents.size());
  if (n < 1) return absl::InvalidArgumentError("tree has no ranks");
  int root = -1;
  std::vector<std::vector<int>> children(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int p = parents[static_cast<size_t>(i)];
    if (p == -1) {
      if (root >= 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tree has two roots: ranks %d and %d", root, i));
      }
      root = i;
      continue;
    }
    if (p < 0 || p >= n || p == i) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d has invalid parent %d (tree of %d ranks)", i, p, n));
    }
    children[static_cast<size_t>(p)].push_back(i);
    if (children[static_cast<size_t>(p)].size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d has more than two children", p));
    }
  }
  if (root < 0) return absl::InvalidArgumentError("tree has no root (parent -1)");
  // Depths by BFS from the root; ranks not reached lie on a cycle.
  std::vector<int> depth(static_cast<size_t>(n), -1);
  std::vector<int> queue = {root};
  depth[static_cast<size_t>(root)] = 0;
  for (size_t q = 0; q < queue.size(); ++q) {
    const int r = queue[q];
    for (int c : children[static_cast<size_t>(r)]) {
      depth[static_cast<size_t>(c)] = depth[static_cast<size_t>(r)] + 1;
      queue.push_back(c);
    }
  }
  if (static_cast<int>(queue.size()) != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parent array has a cycle: %d of %d ranks unreachable from root %d",
        n - static_cast<int>(queue.size()), n, root));
  }
  ValidationRounds classes(4);
  for (int p = 0; p < n; ++p) {
    std::vector<int> kids = children[static_cast<size_t>(p)];
    std::sort(kids.begin(), kids.end());
    for (size_t k = 0; k < kids.size(); ++k) {
      const int c = kids[k];
      const size_t round = (depth[static_cast<size_t>(c)] % 2 == 0 ? 0 : 2) + k;
      classes[round].push_back(direction == TreeDirection::kChildToParent ? LinkTransfer{c, p}
                                                                          : LinkTransfer{p, c});
    }
  }
  ValidationRounds rounds;
  for (auto& r : classes) {
    if (!r.empty()) rounds.push_back(std::move(r));
  }
  return rounds;
}

absl::StatusOr<LinkVerdict> JudgeLinkTimes(absl::Span<const LinkTime> times,
                                           double slow_ratio) {
  if (times.empty()) return absl::InvalidArgumentError("no link times to judge");
  if (!(slow_ratio > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slow_ratio must be > 1, got %g", slow_ratio));
  }
  std::vector<double> values;
  for (const LinkTime& t : times) {
    if (!(std::isfinite(t.seconds) && t.seconds >= 0.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "link %d->%d has invalid time %g", t.sender, t.receiver, t.seconds));
    }
    values.push_back(t.seconds);
  }
  std::sort(values.begin(), values.end());
  const size_t m = values.size();
  const double median = m % 2 == 1 ? values[m / 2] : 0.5 * (values[m / 2 - 1] + values[m / 2]);
  LinkVerdict verdict;
  verdict.median_seconds = median;
  auto is_slow = [&](const LinkTime& t) { return t.seconds > slow_ratio * median; };
  auto ratio = [&](const LinkTime& t) { return median > 0.0 ? t.seconds / median : INFINITY; };
  // Per rank: links touching it, and how many are slow.
  struct Tally {
    int links = 0;
    int slow = 0;
    double ratio_sum = 0.0;
  };
  std::map<int, Tally> tally;
  for (const LinkTime& t : times) {
    for (int r : {t.sender, t.receiver}) {
      Tally& x = tally[r];
      ++x.links;
      if (is_slow(t)) {
        ++x.slow;
        x.ratio_sum += ratio(t);
      }
    }
  }
  for (const auto& [rank, x] : tally) {
    if (x.links >= 2 && x.slow == x.links) {
      verdict.slow_ranks.push_back({rank, x.links, x.ratio_sum / x.links});
    }
  }
  auto rank_is_slow = [&](int r) {
    for (const SlowRank& s : verdict.slow_ranks) {
      if (s.rank == r) return true;
    }
    return false;
  };
  for (const LinkTime& t : times) {
    if (!is_slow(t) || rank_is_slow(t.sender) || rank_is_slow(t.receiver)) continue;
    verdict.slow_links.push_back({t.sender, t.receiver, t.seconds, ratio(t)});
  }
  std::sort(verdict.slow_ranks.begin(), verdict.slow_ranks.end(),
            [](const SlowRank& a, const SlowRank& b) { return a.mean_ratio > b.mean_ratio; });
  std::sort(verdict.slow_links.begin(), verdict.slow_links.end(),
            [](const SlowLink& a, const SlowLink& b) { return a.ratio > b.ratio; });
  return verdict;
}

}  // namespace peregrine
