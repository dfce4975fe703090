#include "checkpoint/backup_placement.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "diagnosis/check.h"

// How backups are placed (ByteRobust section 6.3, "over-eviction aware" backups). The
// controller over-evicts whole parallel groups (stack aggregation, fail-slow), which is
// why backups must avoid every group of their machine.
//  - first PlaceBackups looks for `copies` shift permutations valid for every machine: the
//    cyclic shifts m -> m + s (smallest s first), then two-level shifts that move the
//    index within blocks of `block` machines and the block index at once (for each
//    divisor `block` of the machine count; this covers layouts such as TP in the
//    machine with PP=2, where every plain shift wraps into the same stage). Each is a
//    permutation, so every machine then holds exactly `copies` backups;
//  - otherwise the remaining copies are placed round by round with augmenting paths
//    (bipartite b-matching), raising a round's per-holder cap only as far as needed, so
//    the busiest holder holds as few backups as that procedure can reach.
// Cost: O(machines x gpus_per_machine) per permutation tried (most fail on the first
// machine); the fallback is O(machines^2 x gpus_per_machine) per round at worst.

namespace peregrine {
namespace {

// The sorted ids of every TP, PP and DP group that has a rank on each machine. Ids:
// kind * world + index within the kind, with the rank order of parallel_layout.h
// (rank = tp + tensor * (dp + data * pp)):
//   TP group index = dp + data * pp, PP group index = tp + tensor * dp,
//   DP group index = tp + tensor * pp.
class MachineGroups {
 public:
  explicit MachineGroups(const ParallelLayout& layout) : groups_(layout.machines()) {
    const int64_t world = layout.world_size();
    const int t = layout.tensor();
    const int d = layout.data();
    for (int m = 0; m < layout.machines(); ++m) {
      std::vector<int64_t>& ids = groups_[m];
      for (int i = 0; i < layout.gpus_per_machine(); ++i) {
        const int rank = m * layout.gpus_per_machine() + i;
        const int tp = rank % t;
        const int dp = (rank / t) % d;
        const int pp = rank / (t * d);
        ids.push_back(0 * world + (dp + int64_t{d} * pp));  // tensor
        ids.push_back(1 * world + (tp + int64_t{t} * dp));  // pipeline
        ids.push_back(2 * world + (tp + int64_t{t} * pp));  // data
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
  }

  bool Share(int a, int b) const {
    if (a == b) return true;
    const std::vector<int64_t>& x = groups_[a];
    const std::vector<int64_t>& y = groups_[b];
    size_t i = 0, j = 0;
    while (i < x.size() && j < y.size()) {
      if (x[i] == y[j]) return true;
      if (x[i] < y[j]) ++i; else ++j;
    }
    return false;
  }

  int machines() const { return static_cast<int>(groups_.size()); }

 private:
  std::vector<std::vector<int64_t>> groups_;
};

absl::Status Unplaceable(const ParallelLayout& layout, const MachineGroups& groups, int machine,
                         int copies) {
  int outside = 0;
  for (int p = 0; p < groups.machines(); ++p) outside += groups.Share(machine, p) ? 0 : 1;
  const int first = machine * layout.gpus_per_machine();
  const std::string layout_text =
      absl::StrFormat("TP=%d PP=%d DP=%d on %d machines x %d GPUs", layout.tensor(), layout.pipeline(),
                      layout.data(), layout.machines(), layout.gpus_per_machine());
  if (layout.machines() == 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot place %d checkpoint backup copies: a job of 1 machine has no peer to hold them (%s)", copies,
        layout_text));
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "cannot place %d checkpoint backup copies for machine %d (ranks %d-%d): only %d of the other %d machines "
      "share none of its tensor-, pipeline- or data-parallel groups (%s); a group spanning every machine (e.g. "
      "pure data parallelism) leaves no safe peer, so add machines, split the layout into more groups, or lower "
      "checkpoint.backupCopies",
      copies, machine, first, first + layout.gpus_per_machine() - 1, outside, layout.machines() - 1,
      layout_text));
}

// One round of the fallback: give every machine one more holder, not already holding
// its checkpoint and outside its groups, with at most `cap` machines per holder in
// this round. Kuhn's augmenting paths over candidates in cyclic order from m + 1.
class RoundMatcher {
 public:
  RoundMatcher(const MachineGroups& groups, const std::vector<std::vector<int>>& backups, int cap)
      : groups_(groups), backups_(backups), cap_(cap), n_(groups.machines()), assigned_(n_, -1),
        held_(n_), visited_(n_, 0) {}

  // Returns -1 when every machine got a holder, else the first machine that did not.
  int Run() {
    for (int m = 0; m < n_; ++m) {
      ++stamp_;
      if (!Augment(m)) return m;
    }
    return -1;
  }
  int HolderOf(int m) const { return assigned_[m]; }

 private:
  bool Allowed(int m, int p) const {
    if (groups_.Share(m, p)) return false;
    const std::vector<int>& b = backups_[m];
    return std::find(b.begin(), b.end(), p) == b.end();
  }

  bool Augment(int m) {
    for (int step = 1; step < n_; ++step) {
      const int p = (m + step) % n_;
      if (visited_[p] == stamp_ || !Allowed(m, p)) continue;
      visited_[p] = stamp_;
      if (static_cast<int>(held_[p].size()) < cap_) {
        Assign(m, p);
        return true;
      }
      for (size_t i = 0; i < held_[p].size(); ++i) {
        const int other = held_[p][i];
        if (Augment(other)) {  // `other` moved to another holder; m takes its place at p
          held_[p][i] = m;
          assigned_[m] = p;
          return true;
        }
      }
    }
    return false;
  }

  void Assign(int m, int p) {
    held_[p].push_back(m);
    assigned_[m] = p;
  }

  const MachineGroups& groups_;
  const std::vector<std::vector<int>>& backups_;
  int cap_;
  int n_;
  std::vector<int> assigned_;
  std::vector<std::vector<int>> held_;
  std::vector<int> visited_;
  int stamp_ = 0;
};

}  // namespace

bool ShareParallelGroup(const ParallelLayout& layout, int a, int b) {
  PEREGRINE_CHECK(a >= 0 && a < layout.machines() && b >= 0 && b < layout.machines())
      << "machines " << a << ", " << b;
  return MachineGroups(layout).Share(a, b);
}

absl::StatusOr<BackupPlacement> PlaceBackups(const ParallelLayout& layout, int copies) {
  if (copies < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("checkpoint.backupCopies must be >= 0, got %d", copies));
  }
  const int n = layout.machines();
  BackupPlacement placement;
  placement.backups.assign(n, {});
  placement.holders_load.assign(n, 0);
  if (copies == 0) return placement;
  const MachineGroups groups(layout);
  if (copies >= n) return Unplaceable(layout, groups, 0, copies);

  // Shift permutations. Machine m = lo + block * hi (lo = m mod block) goes to
  // ((lo + a) mod block) + block * ((hi + b) mod (n / block)), for each divisor `block`
  // of n: block = n gives the plain cyclic shifts m -> m + a; smaller blocks shift two
  // "coordinates" at once (e.g. data-parallel index and pipeline stage when a machine
  // holds one TP group), which is what regular layouts need when a plain shift would
  // wrap into the same stage. A permutation is taken when it is valid for every
  // machine and gives each machine a holder it does not have yet.
  std::vector<int> blocks;
  blocks.push_back(n);
  for (int block = 2; block < n; ++block) {
    if (n % block == 0) blocks.push_back(block);
  }
  int found = 0;
  for (int block : blocks) {
    const int rows = n / block;
    for (int b = 0; b < rows && found < copies; ++b) {
      for (int a = 0; a < block && found < copies; ++a) {
        if (a == 0 && b == 0) continue;
        auto peer = [&](int m) { return (m % block + a) % block + block * ((m / block + b) % rows); };
        auto ok = [&](int m) {
          const int q = peer(m);
          const std::vector<int>& have = placement.backups[m];
          return !groups.Share(m, q) && std::find(have.begin(), have.end(), q) == have.end();
        };
        // Conflicts cluster where the shift wraps: check those machines first so a
        // bad candidate is usually rejected in O(1) checks rather than O(n).
        bool valid = true;
        for (int lo : {0, block - a - 1, block - a, block - 1}) {
          for (int hi : {0, rows - b - 1, rows - b, rows - 1}) {
            if (valid && lo >= 0 && lo < block && hi >= 0 && hi < rows) valid = ok(lo + block * hi);
          }
        }
        for (int m = 0; m < n && valid; ++m) valid = ok(m);
        if (!valid) continue;
        for (int m = 0; m < n; ++m) placement.backups[m].push_back(peer(m));
        ++found;
      }
    }
    if (found == copies) break;
  }
  if (found == copies) {
    for (int m = 0; m < n; ++m) placement.holders_load[m] = copies;
    return placement;
  }

  // Fallback rounds. A machine with fewer than `copies` safe peers can never be placed.
  for (int m = 0; m < n; ++m) {
    int outside = 0;
    for (int p = 0; p < n && outside < copies; ++p) outside += groups.Share(m, p) ? 0 : 1;
    if (outside < copies) return Unplaceable(layout, groups, m, copies);
  }
  for (int round = found; round < copies; ++round) {
    // Every machine has a safe peer it does not use yet, so some cap <= n succeeds.
    for (int cap = 1;; ++cap) {
      RoundMatcher matcher(groups, placement.backups, cap);
      const int failed = matcher.Run();
      if (failed >= 0) {
        PEREGRINE_CHECK(cap < n) << "no holder for machine " << failed << " with an unbounded cap";
        continue;
      }
      for (int m = 0; m < n; ++m) placement.backups[m].push_back(matcher.HolderOf(m));
      break;
    }
  }
  for (int m = 0; m < n; ++m) {
    for (int p : placement.backups[m]) ++placement.holders_load[p];
  }
  return placement;
}

}  // namespace peregrine
