#include "checkpoint/fallback_placement.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

// The fallback. A machine's groups are the TP, PP and DP groups of its ranks, with the
// rank order of diagnosis/parallel_layout.h (rank = tp + tensor * (dp + data * pp)). Round
// r gives every machine, in index order, its r-th holder: among the peers it does not use
// yet, the one minimising (shared groups, holders' load so far, cyclic distance after m).
// Cost: O(machines^2 x gpus_per_machine) to count shared groups, O(copies x machines^2)
// for the rounds.

namespace peregrine {
namespace {

std::vector<std::set<int64_t>> GroupsByMachine(const ParallelLayout& layout) {
  const int64_t world = layout.world_size();
  const int t = layout.tensor();
  const int d = layout.data();
  std::vector<std::set<int64_t>> groups(layout.machines());
  for (int m = 0; m < layout.machines(); ++m) {
    for (int i = 0; i < layout.gpus_per_machine(); ++i) {
      const int rank = m * layout.gpus_per_machine() + i;
      const int tp = rank % t;
      const int dp = (rank / t) % d;
      const int pp = rank / (t * d);
      groups[m].insert(0 * world + (dp + int64_t{d} * pp));  // tensor
      groups[m].insert(1 * world + (tp + int64_t{t} * dp));  // pipeline
      groups[m].insert(2 * world + (tp + int64_t{t} * pp));  // data
    }
  }
  return groups;
}

int Shared(const std::set<int64_t>& x, const std::set<int64_t>& y) {
  int n = 0;
  for (int64_t id : x) n += y.count(id) ? 1 : 0;
  return n;
}

}  // namespace

int SharedParallelGroups(const ParallelLayout& layout, int a, int b) {
  const std::vector<std::set<int64_t>> groups = GroupsByMachine(layout);
  return Shared(groups.at(a), groups.at(b));
}

absl::StatusOr<CheckpointPlacement> PlaceBackupsOrFewestShared(const ParallelLayout& layout, int copies) {
  absl::StatusOr<BackupPlacement> exact = PlaceBackups(layout, copies);
  if (exact.ok()) return CheckpointPlacement{*std::move(exact), ""};
  if (exact.status().code() == absl::StatusCode::kInvalidArgument) return exact.status();
  const int n = layout.machines();
  CheckpointPlacement out;
  out.placement.backups.assign(n, {});
  out.placement.holders_load.assign(n, 0);
  if (n == 1) {
    out.degraded_reason = absl::StrFormat(
        "placement degraded: a job of 1 machine has no peer to hold its %d checkpoint backup copies; its "
        "checkpoint is kept on the machine only",
        copies);
    return out;
  }
  const int placed = std::min(copies, n - 1);
  const std::vector<std::set<int64_t>> groups = GroupsByMachine(layout);
  std::vector<std::vector<int>> shared(n, std::vector<int>(n, 0));
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) shared[a][b] = shared[b][a] = Shared(groups[a], groups[b]);
  }
  int worst = 0;
  for (int round = 0; round < placed; ++round) {
    for (int m = 0; m < n; ++m) {
      std::vector<int>& have = out.placement.backups[m];
      int best = -1;
      std::tuple<int, int, int> best_key;
      for (int step = 1; step < n; ++step) {
        const int p = (m + step) % n;
        if (std::find(have.begin(), have.end(), p) != have.end()) continue;
        const std::tuple<int, int, int> key{shared[m][p], out.placement.holders_load[p], step};
        if (best < 0 || key < best_key) {
          best = p;
          best_key = key;
        }
      }
      have.push_back(best);
      ++out.placement.holders_load[best];
      worst = std::max(worst, shared[m][best]);
    }
  }
  out.degraded_reason = absl::StrCat("placement degraded: ", exact.status().message(), "; placed ", placed,
                                     placed == copies ? "" : absl::StrCat(" of ", copies), " copies on the peers "
                                     "sharing the fewest parallel groups (at most ", worst, " shared)");
  return out;
}

}  // namespace peregrine
