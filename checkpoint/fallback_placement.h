// Backup placement that never refuses: PlaceBackups (backup_placement.h) when the layout
// allows it, otherwise the peers sharing the fewest parallel groups, with the reason the
// placement is degraded. In-memory checkpoints are always taken; a degraded placement
// only means that evicting a whole group may take a machine together with a copy.
//
// Contract. PlaceBackupsOrFewestShared returns, for each machine m, min(copies,
// machines - 1) distinct peers (none for a job of one machine). When PlaceBackups
// succeeds its placement is returned unchanged and degraded_reason is empty. Otherwise
// each machine's peers are chosen round by round: the peer sharing the fewest TP, PP and
// DP groups with m, then the least loaded holder, then the nearest in cyclic order after
// m, so the result is balanced and deterministic; degraded_reason says why ("placement
// degraded: ..." with PlaceBackups' explanation). copies < 0 is kInvalidArgument.
//
// Pure functions (no I/O, clocks or randomness); thread-safe.
#ifndef PEREGRINE_CHECKPOINT_FALLBACK_PLACEMENT_H_
#define PEREGRINE_CHECKPOINT_FALLBACK_PLACEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/backup_placement.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

struct CheckpointPlacement {
  BackupPlacement placement;
  std::string degraded_reason;  // "" when every holder is outside its machine's groups
};

// How many distinct TP, PP and DP groups machines a and b both have ranks in (a != b).
int SharedParallelGroups(const ParallelLayout& layout, int a, int b);

absl::StatusOr<CheckpointPlacement> PlaceBackupsOrFewestShared(const ParallelLayout& layout, int copies);

}  // namespace peregrine

#endif  // PEREGRINE_CHECKPOINT_FALLBACK_PLACEMENT_H_
