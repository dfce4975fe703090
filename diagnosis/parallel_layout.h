// ParallelLayout: the hybrid-parallel (TP x PP x DP) layout of a training job and the
// mapping between global ranks, machines, coordinates and communication groups.
//
// Rank order is Megatron-LM's default (TP fastest, then DP, then PP):
//   rank = tp + tensor * (dp + data * pp)
// Machine m holds the gpus_per_machine consecutive ranks starting at m * gpus_per_machine.
//
// Pure value type; thread-compatible. Construct with ParallelLayout::Create, which
// validates; every accessor then PEREGRINE_CHECKs its arguments (internal invariants).
#ifndef PEREGRINE_DIAGNOSIS_PARALLEL_LAYOUT_H_
#define PEREGRINE_DIAGNOSIS_PARALLEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

enum class GroupKind { kTensor, kPipeline, kData };

// "tp", "pp", "dp".
const char* GroupKindName(GroupKind kind);

struct RankCoordinates {
  int tp = 0;
  int pp = 0;
  int dp = 0;
  bool operator==(const RankCoordinates&) const = default;
};

// One communication group: its kind, index among groups of that kind, and members
// in group-rank order.
struct CommGroup {
  GroupKind kind = GroupKind::kTensor;
  int index = 0;
  std::vector<int> ranks;
};

class ParallelLayout {
 public:
  // Fails with kInvalidArgument naming the offending field when a size is < 1,
  // gpus_per_machine does not divide the world size, or the sizes overflow.
  static absl::StatusOr<ParallelLayout> Create(int tensor, int pipeline, int data,
                                               int gpus_per_machine);

  int tensor() const { return tensor_; }
  int pipeline() const { return pipeline_; }
  int data() const { return data_; }
  int gpus_per_machine() const { return gpus_per_machine_; }
  int world_size() const { return tensor_ * pipeline_ * data_; }
  int machines() const { return world_size() / gpus_per_machine_; }

  RankCoordinates Coordinates(int rank) const;
  int RankOf(const RankCoordinates& c) const;
  int MachineOf(int rank) const { return rank / gpus_per_machine_; }
  int LocalRank(int rank) const { return rank % gpus_per_machine_; }
  std::vector<int> RanksOfMachine(int machine) const;

  int GroupCount(GroupKind kind) const;
  int GroupSize(GroupKind kind) const;
  // The index of the group of `kind` that contains `rank`.
  int GroupIndexOf(GroupKind kind, int rank) const;
  CommGroup Group(GroupKind kind, int index) const;
  std::vector<CommGroup> Groups(GroupKind kind) const;
  // Machines holding at least one rank of the group.
  std::vector<int> MachinesOfGroup(const CommGroup& group) const;

  std::string DebugString() const;  // "TP=2 PP=2 DP=2 (8 ranks, 4 machines x 2)"

 private:
  ParallelLayout(int t, int p, int d, int g)
      : tensor_(t), pipeline_(p), data_(d), gpus_per_machine_(g) {}
  int tensor_;
  int pipeline_;
  int data_;
  int gpus_per_machine_;
};

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_PARALLEL_LAYOUT_H_
