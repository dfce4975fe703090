#include "diagnosis/mfu_rounds.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "diagnosis/check.h"

namespace peregrine {
namespace {

constexpr GroupKind kKindOrder[] = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData};

int KindOrder(GroupKind kind) {
  for (int i = 0; i < 3; ++i) {
    if (kKindOrder[i] == kind) return i;
  }
  return 3;
}

}  // namespace

std::optional<FlaggedGroup> GroupWithMostOutliers(const ParallelLayout& layout,
                                                  absl::Span<const int> suspect_ranks) {
  std::set<int> suspect_machines;
  for (int rank : suspect_ranks) {
    PEREGRINE_CHECK(rank >= 0 && rank < layout.world_size()) << "rank " << rank;
    suspect_machines.insert(layout.MachineOf(rank));
  }
  if (suspect_machines.empty()) return std::nullopt;
  // Best key: (-score, machines, kind order, index).
  std::optional<std::tuple<int, size_t, int, int>> best;
  FlaggedGroup flagged;
  for (int k = 0; k < 3; ++k) {
    const GroupKind kind = kKindOrder[k];
    std::set<int> candidates;  // only groups touching a suspect machine can score
    for (int machine : suspect_machines) {
      for (int rank : layout.RanksOfMachine(machine)) {
        candidates.insert(layout.GroupIndexOf(kind, rank));
      }
    }
    for (int index : candidates) {
      const std::vector<int> machines = layout.MachinesOfGroup(layout.Group(kind, index));
      int score = 0;
      for (int m : machines) score += suspect_machines.count(m) > 0 ? 1 : 0;
      auto key = std::make_tuple(-score, machines.size(), k, index);
      if (!best || key < *best) {
        best = key;
        flagged = {kind, index};
      }
    }
  }
  return flagged;
}

MfuDropRounds::MfuDropRounds(ParallelLayout layout, int rounds)
    : layout_(std::move(layout)), rounds_(rounds) {
  PEREGRINE_CHECK(rounds_ >= 1) << "rounds " << rounds_;
}

void MfuDropRounds::RecordRound(std::optional<FlaggedGroup> flagged) {
  if (flagged) {
    PEREGRINE_CHECK(flagged->index >= 0 && flagged->index < layout_.GroupCount(flagged->kind))
        << GroupKindName(flagged->kind) << " group " << flagged->index;
  }
  history_.push_back(flagged);
}

void MfuDropRounds::RecordSuspects(absl::Span<const int> suspect_ranks) {
  RecordRound(GroupWithMostOutliers(layout_, suspect_ranks));
}

std::optional<MfuVerdict> MfuDropRounds::Decide() const {
  if (!complete()) return std::nullopt;
  struct Tally {
    int flags = 0;
    int last_round = -1;
  };
  std::vector<std::pair<FlaggedGroup, Tally>> tallies;
  const int first = rounds_recorded() - rounds_;
  for (int round = first; round < rounds_recorded(); ++round) {
    const std::optional<FlaggedGroup>& f = history_[round];
    if (!f) continue;
    auto it = std::find_if(tallies.begin(), tallies.end(),
                           [&](const auto& t) { return t.first == *f; });
    if (it == tallies.end()) {
      tallies.push_back({*f, {}});
      it = tallies.end() - 1;
    }
    ++it->second.flags;
    it->second.last_round = round;
  }
  MfuVerdict verdict;
  if (tallies.empty()) {
    verdict.explanation =
        absl::StrFormat("none of the last %d aggregation rounds found outliers: nothing to evict",
                        rounds_);
    return verdict;
  }
  auto better = [](const std::pair<FlaggedGroup, Tally>& a,
                   const std::pair<FlaggedGroup, Tally>& b) {
    return std::make_tuple(-a.second.flags, -a.second.last_round, KindOrder(a.first.kind),
                           a.first.index) < std::make_tuple(-b.second.flags, -b.second.last_round,
                                                            KindOrder(b.first.kind),
                                                            b.first.index);
  };
  const auto& winner = *std::min_element(tallies.begin(), tallies.end(), better);
  verdict.group = winner.first;
  verdict.flags = winner.second.flags;
  verdict.machines_to_evict =
      layout_.MachinesOfGroup(layout_.Group(winner.first.kind, winner.first.index));
  std::sort(verdict.machines_to_evict.begin(), verdict.machines_to_evict.end());
  std::vector<std::string> all;
  for (const auto& [g, t] : tallies) {
    all.push_back(absl::StrFormat("%s%d x%d", GroupKindName(g.kind), g.index, t.flags));
  }
  verdict.explanation = absl::StrFormat(
      "%s group %d was flagged in %d of the last %d rounds (tally: %s); it is the degrader: "
      "evict machines [%s]",
      GroupKindName(winner.first.kind), winner.first.index, winner.second.flags, rounds_,
      absl::StrJoin(all, ", "), absl::StrJoin(verdict.machines_to_evict, ","));
  return verdict;
}

}  // namespace peregrine
