// In-memory checkpoints, the controller's pure decisions (spec.checkpoint; the agents'
// side is agent/checkpoint): where each slot's shards are copied, which step is complete
// for the whole job (the step every restart resumes after), which older step a failed
// restore falls back to, and the CheckpointPlan each slot's agent gets.
//
// Slot reports are indexed by slot; a slot whose agent has not reported its store yet
// is nullptr. Steps whose restore failed (CheckpointStatus::failed_steps) are never
// complete again.
//
// Pure functions: no clocks, I/O or randomness; thread-safe.
#ifndef PEREGRINE_CONTROLLER_CORE_CHECKPOINT_POLICY_H_
#define PEREGRINE_CONTROLLER_CORE_CHECKPOINT_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

// The placement of the job's slots' copies (checkpoint/fallback_placement.h): by slot,
// with the reason it is degraded ("" when every holder is outside the slot's groups).
// Empty with a reason when the layout is invalid.
struct SlotPlacement {
  std::vector<CheckpointSlotPlacement> slots;
  std::string degraded_reason;
};
SlotPlacement PlaceCheckpointBackups(const TrainingJobSpec& spec);

// The newest step every slot has backed up (stored, when backupCopies is 0) and that is
// not in `failed_steps`; nullopt when some slot has no report or no such step exists.
std::optional<uint64_t> CompleteStep(const std::vector<const CheckpointReportObservation*>& slots,
                                     int backup_copies, const std::vector<uint64_t>& failed_steps);

// The newest step every slot reports persisted; nullopt when there is none.
std::optional<uint64_t> PersistedStep(const std::vector<const CheckpointReportObservation*>& slots);

// Where a failed restore of `failed_step` resumes instead.
struct RestoreFallback {
  uint64_t step = 0;
  bool persisted = false;  // from persistPath rather than memory
  std::string why;         // where every slot's shards of `step` are
};
// The newest step below `failed_step`, not in `failed_steps`, whose shards every slot can
// obtain: its own store (stored_steps of its report) or a copy some agent holds
// (`holders`: every agent's report, slots' and standbys'); else `persisted_step` when it is
// below `failed_step` and not failed. nullopt when nothing is left. For the slots in
// `corrupt_copy_slots` (their restore of `failed_step` found a corrupt shard) the peers'
// copies do not count: a holder that served one corrupt copy is not trusted with the older
// ones, so such a slot falls back to its own copy or to the persisted step.
std::optional<RestoreFallback> FallbackStep(const std::vector<const CheckpointReportObservation*>& slots,
                                            const std::vector<const CheckpointReportObservation*>& holders,
                                            uint64_t failed_step, const std::vector<uint64_t>& failed_steps,
                                            uint64_t persisted_step, const std::string& persist_dir,
                                            const std::set<int>& corrupt_copy_slots = {});

// The CheckpointPlan of `slot`'s assignment (interval 0, nothing else, when checkpoints
// are off): copies go to the placement's holders, the slot holds copies for the slots
// whose holders include it, it restores status.resume_step from its holders, and the
// committed step is status.checkpoint.last_complete_step.
CheckpointPlanSpec CheckpointPlanFor(const TrainingJobSpec& spec, const JobStatus& status, int slot);

// Every slot's CheckpointPlan at once, the same as CheckpointPlanFor for each, in one pass
// over the placement (O(slots x copies) instead of O(slots^2)): for DesiredAgents and a
// job-wide restart, which need them all. A slot absent from the map gets the plan of a
// slot the placement does not name (CheckpointPlanFor's).
std::map<int, CheckpointPlanSpec> CheckpointPlansBySlot(const TrainingJobSpec& spec, const JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_CHECKPOINT_POLICY_H_
