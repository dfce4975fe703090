// Neighbour pairing for the inter-machine all-gather stage of stop-time diagnosis: every
// machine is tested together with its two ring neighbours, so that a machine whose every
// pair fails is the culprit while its healthy neighbours fail only one pair.
//
// Machines 0..n-1 form a ring; the pairs are its edges (i, i+1 mod n), scheduled in rounds
// of disjoint pairs (one diagnostic at a time per machine):
//   n even >= 4: round 0 = (0,1),(2,3),...; round 1 = (1,2),(3,4),...,(n-1,0);
//   n odd  >= 3: round 0 = (0,1),(2,3),...,(n-3,n-2); round 1 = (1,2),...,(n-2,n-1);
//                round 2 = (n-1,0);
//   n == 2: one round with the single pair (0,1) (a failure cannot be attributed);
//   n <= 1: no rounds.
// Verdict (n >= 3): the machines all of whose pairs failed. n == 2 with a failing pair: no
// verdict (both machines are equally suspect).
//
// Pure functions. Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_NEIGHBOUR_PAIRS_H_
#define PEREGRINE_CONTROLLER_CORE_NEIGHBOUR_PAIRS_H_

#include <set>
#include <utility>
#include <vector>

namespace peregrine {

struct NeighbourPair {
  int first = 0;
  int second = 0;
  int index = 0;  // the ring edge (0..n-1): unique per pair over all rounds
  bool operator==(const NeighbourPair&) const = default;
};

// The rounds for n machines (see above).
std::vector<std::vector<NeighbourPair>> PlanNeighbourPairs(int n);

// Machines every one of whose pairs is in `failed_edges` (pair indices), n >= 3; empty for
// n < 3.
std::set<int> NeighbourCulprits(int n, const std::set<int>& failed_edges);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_NEIGHBOUR_PAIRS_H_
