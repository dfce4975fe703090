#include "controller/core/neighbour_pairs.h"

namespace peregrine {

std::vector<std::vector<NeighbourPair>> PlanNeighbourPairs(int n) {
  std::vector<std::vector<NeighbourPair>> rounds;
  if (n <= 1) return rounds;
  if (n == 2) return {{NeighbourPair{0, 1, 0}}};
  rounds.resize(n % 2 == 0 ? 2 : 3);
  for (int i = 0; i < n; ++i) {
    const NeighbourPair p{i, (i + 1) % n, i};
    if (n % 2 == 1 && i == n - 1) {
      rounds[2].push_back(p);
    } else {
      rounds[i % 2].push_back(p);
    }
  }
  return rounds;
}

std::set<int> NeighbourCulprits(int n, const std::set<int>& failed_edges) {
  std::set<int> out;
  if (n < 3) return out;
  for (int m = 0; m < n; ++m) {
    const int left = (m - 1 + n) % n;  // edge (m-1, m)
    const int right = m;               // edge (m, m+1)
    if (failed_edges.count(left) && failed_edges.count(right)) out.insert(m);
  }
  return out;
}

}  // namespace peregrine
