#include "agent/checkpoint/store_policy.h"

#include <algorithm>
#include <limits>

namespace peregrine::checkpoint {

std::vector<uint64_t> StoredSteps(const std::vector<RankFiles>& ranks) {
  std::vector<uint64_t> stored;
  if (ranks.empty()) return stored;
  for (const auto& [step, bytes] : ranks.front().finished) {
    bool everywhere = true;
    for (const RankFiles& rank : ranks) {
      if (!rank.finished.contains(step)) {
        everywhere = false;
        break;
      }
    }
    if (everywhere) stored.push_back(step);
  }
  return stored;
}

// Pruning keeps what a restore or a backup may still need. A restart resumes from the
// controller's committed step, which lags the newest stored step by the time its
// backups take; keeping the two newest stored steps (and the named committed and
// backed-up steps) covers it. Steps newer than the newest stored step are saves the
// other local ranks have not finished yet; two per rank are kept so a rank that saves
// ahead never loses the step its slower neighbours are about to complete.
std::vector<PrunedShard> DecidePrune(const std::vector<RankFiles>& ranks, uint64_t committed_step,
                                     uint64_t backed_up_step) {
  const std::vector<uint64_t> stored = StoredSteps(ranks);
  std::set<uint64_t> keep = {committed_step, backed_up_step};
  for (size_t i = stored.size() >= 2 ? stored.size() - 2 : 0; i < stored.size(); ++i) keep.insert(stored[i]);
  const uint64_t newest_stored = stored.empty() ? 0 : stored.back();
  std::vector<PrunedShard> pruned;
  for (const RankFiles& rank : ranks) {
    std::set<uint64_t> rank_keep = keep;
    int newer_kept = 0;
    for (auto it = rank.finished.rbegin(); it != rank.finished.rend() && it->first > newest_stored; ++it) {
      if (newer_kept++ < 2) rank_keep.insert(it->first);
    }
    std::vector<PrunedShard> of_rank;
    uint64_t largest = 0;
    size_t largest_index = 0;
    for (const auto& [step, bytes] : rank.finished) {
      if (rank_keep.contains(step)) continue;
      if (of_rank.empty() || bytes > largest) {
        largest = bytes;
        largest_index = of_rank.size();
      }
      of_rank.push_back(PrunedShard{rank.global_rank, step, false});
    }
    if (!of_rank.empty() && !rank.has_free_buffer) of_rank[largest_index].recycle = true;
    pruned.insert(pruned.end(), of_rank.begin(), of_rank.end());
  }
  return pruned;
}

uint64_t MemoryBudget(const BudgetInputs& inputs) {
  uint64_t budget = std::numeric_limits<uint64_t>::max();
  for (uint64_t limit :
       {inputs.filesystem_bytes, inputs.cgroup_limit_bytes, inputs.file_size_limit, inputs.plan_limit_bytes}) {
    if (limit > 0) budget = std::min(budget, limit);
  }
  return budget;
}

Allowance DecideAllowance(uint64_t budget, uint32_t local_ranks, uint64_t held_bytes, uint64_t last_shard_bytes) {
  Allowance out;
  if (local_ranks == 0) return out;
  const uint64_t available = budget > held_bytes ? budget - held_bytes : 0;
  const uint64_t two_versions = available / (2ull * local_ranks);
  if (last_shard_bytes > 0 && two_versions < last_shard_bytes) {
    out.memory_short = true;
    out.per_rank_bytes = available / local_ranks;
  } else {
    out.per_rank_bytes = two_versions;
  }
  return out;
}

std::optional<uint64_t> NextBackupStep(const std::vector<uint64_t>& stored, const std::set<uint64_t>& backed_up) {
  if (stored.empty() || backed_up.contains(stored.back())) return std::nullopt;
  return stored.back();
}

std::vector<HeldKey> CompleteHeld(const HeldIndex& held, uint32_t ranks_per_slot) {
  std::vector<HeldKey> out;
  for (const auto& [slot, steps] : held) {
    for (const auto& [step, ranks] : steps) {
      if (ranks_per_slot > 0 && ranks.size() >= ranks_per_slot) out.push_back(HeldKey{slot, step});
    }
  }
  return out;
}

std::vector<HeldKey> HeldToDrop(const HeldIndex& held, const std::set<uint32_t>& hold_for, uint32_t ranks_per_slot,
                                uint64_t committed_step) {
  std::vector<HeldKey> drop;
  for (const auto& [slot, steps] : held) {
    const bool wanted = hold_for.contains(slot);
    int complete_seen = 0;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      // Newest first: keep until two complete steps have been seen, then drop the rest.
      const bool drop_it = !wanted || (complete_seen >= 2 && it->first != committed_step);
      if (drop_it) {
        drop.push_back(HeldKey{slot, it->first});
      } else if (ranks_per_slot > 0 && it->second.size() >= ranks_per_slot) {
        ++complete_seen;
      }
    }
  }
  return drop;
}

absl::Duration RetryDelay(int attempt) {
  absl::Duration delay = absl::Milliseconds(100);
  for (int i = 0; i < attempt && delay < absl::Seconds(10); ++i) delay *= 2;
  return std::min(delay, absl::Seconds(10));
}

}  // namespace peregrine::checkpoint
