// Maps NCCL communicators seen by the hook on many ranks to the job's parallel groups.
//
// Every rank's ring lists the communicators its process created with the cross-rank id
// (identical on all members), the process's rank inside the communicator and its global
// RANK. Joining those observations per id gives each communicator's members in
// communicator-rank order; a communicator whose member set equals a TP, PP or DP group of
// the ParallelLayout (or the whole world) is labelled with it.
//
// Pure function of its inputs; thread-compatible.
#ifndef PEREGRINE_DIAGNOSIS_COMM_GROUPS_H_
#define PEREGRINE_DIAGNOSIS_COMM_GROUPS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

// One rank's view of one communicator (from NcclRingReader::Comms()).
struct CommObservation {
  uint64_t comm_id = 0;
  int global_rank = -1;  // the observing process's RANK
  int rank = -1;         // its rank inside the communicator
  int nranks = -1;
};

struct CommGroupMatch {
  uint64_t comm_id = 0;
  int nranks = 0;
  // Global rank of each communicator rank; -1 where no observation arrived.
  std::vector<int> members;
  bool complete = false;  // every communicator rank observed
  bool world = false;     // members are exactly all ranks of the layout
  std::optional<GroupKind> kind;  // set when the member set is one TP/PP/DP group
  int group_index = -1;           // that group's index
};

// Joins observations by comm_id (sorted by comm_id in the result). Observations with
// comm_id 0 or an unknown rank/global rank are ignored. Fails with kInvalidArgument
// when observations contradict each other (different nranks for one id, two global
// ranks claiming one communicator rank, a rank outside [0, nranks) or outside the
// layout's world).
absl::StatusOr<std::vector<CommGroupMatch>> MatchCommsToGroups(
    const std::vector<CommObservation>& observations, const ParallelLayout& layout);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_COMM_GROUPS_H_
