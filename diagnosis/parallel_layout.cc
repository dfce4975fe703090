#include "diagnosis/parallel_layout.h"

#include <cstdlib>
#include <limits>

#include "diagnosis/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace peregrine {

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor: return "tp";
    case GroupKind::kPipeline: return "pp";
    case GroupKind::kData: return "dp";
  }
  return "?";
}

absl::StatusOr<ParallelLayout> ParallelLayout::Create(int tensor, int pipeline, int data,
                                                      int gpus_per_machine) {
  if (tensor < 1) return absl::InvalidArgumentError(absl::StrFormat("parallelism.tensor must be >= 1, got %d", tensor));
  if (pipeline < 1) return absl::InvalidArgumentError(absl::StrFormat("parallelism.pipeline must be >= 1, got %d", pipeline));
  if (data < 1) return absl::InvalidArgumentError(absl::StrFormat("parallelism.data must be >= 1, got %d", data));
  if (gpus_per_machine < 1) return absl::InvalidArgumentError(absl::StrFormat("gpusPerMachine must be >= 1, got %d", gpus_per_machine));
  const int64_t world = int64_t{tensor} * pipeline * data;
  if (world > std::numeric_limits<int32_t>::max() / 4) {
    return absl::InvalidArgumentError(absl::StrFormat("parallelism: tensor*pipeline*data = %d is too large", world));
  }
  if (world % gpus_per_machine != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parallelism: tensor*pipeline*data = %d is not a multiple of gpusPerMachine = %d", world, gpus_per_machine));
  }
  return ParallelLayout(tensor, pipeline, data, gpus_per_machine);
}

RankCoordinates ParallelLayout::Coordinates(int rank) const {
  PEREGRINE_CHECK(rank >= 0 && rank < world_size()) << "rank " << rank;
  RankCoordinates c;
  c.tp = rank % tensor_;
  c.dp = (rank / tensor_) % data_;
  c.pp = rank / (tensor_ * data_);
  return c;
}

int ParallelLayout::RankOf(const RankCoordinates& c) const {
  PEREGRINE_CHECK(c.tp >= 0 && c.tp < tensor_ && c.dp >= 0 && c.dp < data_ && c.pp >= 0 && c.pp < pipeline_);
  return c.tp + tensor_ * (c.dp + data_ * c.pp);
}

std::vector<int> ParallelLayout::RanksOfMachine(int machine) const {
  PEREGRINE_CHECK(machine >= 0 && machine < machines()) << "machine " << machine;
  std::vector<int> ranks;
  for (int i = 0; i < gpus_per_machine_; ++i) ranks.push_back(machine * gpus_per_machine_ + i);
  return ranks;
}

int ParallelLayout::GroupCount(GroupKind kind) const { return world_size() / GroupSize(kind); }

int ParallelLayout::GroupSize(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTensor: return tensor_;
    case GroupKind::kPipeline: return pipeline_;
    case GroupKind::kData: return data_;
  }
  return 0;
}

int ParallelLayout::GroupIndexOf(GroupKind kind, int rank) const {
  const RankCoordinates c = Coordinates(rank);
  switch (kind) {
    case GroupKind::kTensor: return c.dp + data_ * c.pp;   // fixed (dp, pp)
    case GroupKind::kPipeline: return c.tp + tensor_ * c.dp;  // fixed (tp, dp)
    case GroupKind::kData: return c.tp + tensor_ * c.pp;   // fixed (tp, pp)
  }
  return 0;
}

CommGroup ParallelLayout::Group(GroupKind kind, int index) const {
  PEREGRINE_CHECK(index >= 0 && index < GroupCount(kind)) << GroupKindName(kind) << " group " << index;
  CommGroup g;
  g.kind = kind;
  g.index = index;
  RankCoordinates c;
  switch (kind) {
    case GroupKind::kTensor:
      c.dp = index % data_;
      c.pp = index / data_;
      for (c.tp = 0; c.tp < tensor_; ++c.tp) g.ranks.push_back(RankOf(c));
      break;
    case GroupKind::kPipeline:
      c.tp = index % tensor_;
      c.dp = index / tensor_;
      for (c.pp = 0; c.pp < pipeline_; ++c.pp) g.ranks.push_back(RankOf(c));
      break;
    case GroupKind::kData:
      c.tp = index % tensor_;
      c.pp = index / tensor_;
      for (c.dp = 0; c.dp < data_; ++c.dp) g.ranks.push_back(RankOf(c));
      break;
  }
  return g;
}

std::vector<CommGroup> ParallelLayout::Groups(GroupKind kind) const {
  std::vector<CommGroup> groups;
  for (int i = 0; i < GroupCount(kind); ++i) groups.push_back(Group(kind, i));
  return groups;
}

std::vector<int> ParallelLayout::MachinesOfGroup(const CommGroup& group) const {
  std::vector<int> machines;
  for (int r : group.ranks) {
    const int m = MachineOf(r);
    if (machines.empty() || machines.back() != m) {
      bool seen = false;
      for (int x : machines) seen = seen || x == m;
      if (!seen) machines.push_back(m);
    }
  }
  return machines;
}

std::string ParallelLayout::DebugString() const {
  return absl::StrFormat("TP=%d PP=%d DP=%d (%d ranks, %d machines x %d)", tensor_, pipeline_, data_,
                         world_size(), machines(), gpus_per_machine_);
}

}  // namespace peregrine
