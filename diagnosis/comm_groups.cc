#include "diagnosis/comm_groups.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"

namespace peregrine {

absl::StatusOr<std::vector<CommGroupMatch>> MatchCommsToGroups(
    const std::vector<CommObservation>& observations, const ParallelLayout& layout) {
  std::map<uint64_t, CommGroupMatch> by_id;
  for (const CommObservation& o : observations) {
    if (o.comm_id == 0 || o.rank < 0 || o.nranks <= 0 || o.global_rank < 0) continue;
    if (o.rank >= o.nranks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "communicator %016x: rank %d outside its size %d", o.comm_id, o.rank, o.nranks));
    }
    if (o.global_rank >= layout.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("communicator %016x: global rank %d outside the world of %d",
                          o.comm_id, o.global_rank, layout.world_size()));
    }
    auto [it, inserted] = by_id.try_emplace(o.comm_id);
    CommGroupMatch& m = it->second;
    if (inserted) {
      m.comm_id = o.comm_id;
      m.nranks = o.nranks;
      m.members.assign(static_cast<size_t>(o.nranks), -1);
    } else if (m.nranks != o.nranks) {
      return absl::InvalidArgumentError(
          absl::StrFormat("communicator %016x: size %d on one rank, %d on another",
                          o.comm_id, m.nranks, o.nranks));
    }
    int& slot = m.members[static_cast<size_t>(o.rank)];
    if (slot != -1 && slot != o.global_rank) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "communicator %016x: rank %d claimed by global ranks %d and %d", o.comm_id,
          o.rank, slot, o.global_rank));
    }
    slot = o.global_rank;
  }
  std::vector<CommGroupMatch> out;
  out.reserve(by_id.size());
  for (auto& [id, m] : by_id) {
    m.complete = std::find(m.members.begin(), m.members.end(), -1) == m.members.end();
    if (m.complete) {
      std::vector<int> sorted = m.members;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "communicator %016x: one global rank holds two communicator ranks", id));
      }
      m.world = m.nranks == layout.world_size();
      for (GroupKind kind : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
        if (layout.GroupSize(kind) != m.nranks) continue;
        const int index = layout.GroupIndexOf(kind, sorted.front());
        std::vector<int> group = layout.Group(kind, index).ranks;
        std::sort(group.begin(), group.end());
        if (group == sorted) {
          m.kind = kind;
          m.group_index = index;
          break;
        }
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace peregrine
