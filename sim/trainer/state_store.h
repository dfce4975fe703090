// Saving and restoring a sim-trainer rank's TrainState (train_state.h) in the Peregrine
// agent's checkpoint store, through the client library's C ABI (client/peregrine_client.h).
// The store is named by the environment the agent sets (PEREGRINE_CHECKPOINT_DIR, ...);
// without it there is no store.
//
// Thread safety: call from the training thread only. Errors as below.
#ifndef PEREGRINE_SIM_TRAINER_STATE_STORE_H_
#define PEREGRINE_SIM_TRAINER_STATE_STORE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/trainer/train_state.h"

namespace peregrine::sim {

// Whether the environment names a checkpoint store.
bool CheckpointStoreAvailable();

// Saves `state` as this rank's shard of state.step. OK when saved; kResourceExhausted
// with the store's reason when the save was skipped (over the allowance, memory short:
// training goes on); kFailedPrecondition when there is no store; kInternal on an I/O error.
absl::Status SaveTrainState(const StateShape& shape, const TrainState& state);

// This rank's state of `step` from the store. kNotFound when the store has no shard of
// that step for this rank (or there is no store); kDataLoss when the shard is corrupt or
// partial; kFailedPrecondition when it belongs to another layout, seed or step.
absl::StatusOr<TrainState> LoadTrainState(const StateShape& shape, uint64_t step);

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_TRAINER_STATE_STORE_H_
