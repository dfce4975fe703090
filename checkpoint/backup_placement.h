// Backup placement for in-memory checkpoints ("over-eviction aware" backups): every
// machine's checkpoint shards are copied to peer machines that share none of its ranks'
// tensor-, pipeline- or data-parallel groups, so a group eviction never takes a machine
// and all of its backups at once.
//
// Contract. PlaceBackups returns, for each machine m, `copies` distinct peers, none of
// which shares a TP, PP or DP group with m (two machines share a group when some rank
// of one and some rank of the other are in the same group). The placement is balanced
// and deterministic (shift permutations where they exist, so every machine then holds
// exactly `copies` backups). It fails with kInvalidArgument when copies < 0, and with
// kFailedPrecondition explaining which machine cannot be placed and why (its groups reach
// every other machine, or too few machines) when some machine has fewer than `copies`
// peers outside its groups, e.g. a pure data-parallel job, or a single machine. The
// placement procedure and its cost are described in backup_placement.cc.
//
// Pure functions (no I/O, clocks or randomness); thread-safe. Uses only the inline
// accessors of ParallelLayout and its documented rank order.
#ifndef PEREGRINE_CHECKPOINT_BACKUP_PLACEMENT_H_
#define PEREGRINE_CHECKPOINT_BACKUP_PLACEMENT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

struct BackupPlacement {
  // backups[m]: the machines holding machine m's checkpoint, `copies` distinct peers,
  // in copy order.
  std::vector<std::vector<int>> backups;
  // holders_load[p]: how many machines' checkpoints machine p holds.
  std::vector<int> holders_load;
};

// True when some rank of machine `a` and some rank of machine `b` are in the same TP,
// PP or DP group (always true for a == b). Machines must be in [0, layout.machines()).
bool ShareParallelGroup(const ParallelLayout& layout, int a, int b);

absl::StatusOr<BackupPlacement> PlaceBackups(const ParallelLayout& layout, int copies);

}  // namespace peregrine

#endif  // PEREGRINE_CHECKPOINT_BACKUP_PLACEMENT_H_
