// The training state of one sim-trainer rank: its shard of the weights (its pipeline
// stage's layers, its tensor-parallel columns), the SGD momentum of those weights, the
// data RNG, the data position (samples this rank's data-parallel replica has read) and the
// last completed step. A checkpoint holds exactly this, so a rank restored from one
// continues bit-identically.
//
// Encoded as three segments (the shard format's payload, checkpoint/shard_format.h):
//   0: the weights (float32, host byte order), 1: the momentum (same size),
//   2: the meta record (fixed little-endian fields: a magic, the layout the state was
//      made for, the step, the RNG state and the data position).
// DecodeTrainState checks that the segments belong to this rank's layout and step.
//
// Plain values; functions are pure and thread-safe. Errors: kDataLoss for a malformed
// state, kFailedPrecondition for a state of another layout, seed or step.
#ifndef PEREGRINE_SIM_TRAINER_TRAIN_STATE_H_
#define PEREGRINE_SIM_TRAINER_TRAIN_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine::sim {

// What a state was made for: a state loads only into the same shape and seed.
struct StateShape {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t tp = 1, pp = 1, dp = 1;
  uint32_t hidden = 0;
  uint32_t layers = 0;         // layers of this rank's stage
  uint32_t micro_batches = 0;  // per step, per data-parallel replica
  uint64_t seed = 0;
  uint64_t weight_count = 0;   // floats of this rank's weight shard
  bool operator==(const StateShape&) const = default;
};

struct TrainState {
  std::vector<float> weights;
  std::vector<float> momentum;  // SGD momentum buffer, same size as weights
  uint64_t rng = 0;             // splitmix64 state of the data RNG
  uint64_t data_position = 0;   // samples read so far by this data-parallel replica
  uint64_t step = 0;            // last completed step
};

// SGD with momentum: v = mu v + g; w -= lr v.
inline constexpr float kLearningRate = 0.02f;
inline constexpr float kMomentum = 0.9f;

// The next value of a splitmix64 generator (advances *state): the state advances by a fixed
// gamma per draw, so a state n draws on is the initial state + n * gamma.
uint64_t NextRandom(uint64_t* state);

// The initial state of data-parallel replica `dp`'s data RNG for `seed`.
uint64_t InitialDataRng(uint64_t seed, uint32_t dp);

// The bytes of the meta segment (segment 2) of `state` for `shape`.
std::string EncodeStateMeta(const StateShape& shape, const TrainState& state);

// The state in `segments` (as saved: weights, momentum, meta); `step` is the step it must
// hold. Errors name what does not match.
absl::StatusOr<TrainState> DecodeTrainState(const StateShape& shape, uint64_t step,
                                            absl::Span<const absl::Span<const uint8_t>> segments);

// Lower-case hex SHA-256 of the weights' bytes.
std::string WeightDigest(absl::Span<const float> weights);

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_TRAINER_TRAIN_STATE_H_
