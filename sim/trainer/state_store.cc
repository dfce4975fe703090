#include "sim/trainer/state_store.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/peregrine_client.h"

namespace peregrine::sim {
namespace {

// Closes a loaded shard when it goes out of scope.
struct ShardCloser {
  void operator()(pg_shard* s) const { pg_shard_close(s); }
};

}  // namespace

bool CheckpointStoreAvailable() { return pg_available() != 0; }

absl::Status SaveTrainState(const StateShape& shape, const TrainState& state) {
  const std::string meta = EncodeStateMeta(shape, state);
  const void* data[3] = {state.weights.data(), state.momentum.data(), meta.data()};
  const uint64_t lengths[3] = {state.weights.size() * sizeof(float),
                               state.momentum.size() * sizeof(float), meta.size()};
  char err[512] = "";
  switch (pg_save(state.step, data, lengths, 3, err, sizeof(err))) {
    case PG_OK:
      return absl::OkStatus();
    case PG_SKIPPED:
      return absl::ResourceExhaustedError(absl::StrCat("checkpoint of step ", state.step, " skipped: ", err));
    case PG_NO_AGENT:
      return absl::FailedPreconditionError("no checkpoint store (PEREGRINE_CHECKPOINT_DIR is not set)");
    default:
      return absl::InternalError(absl::StrCat("checkpoint of step ", state.step, " failed: ", err));
  }
}

absl::StatusOr<TrainState> LoadTrainState(const StateShape& shape, uint64_t step) {
  pg_shard* raw = nullptr;
  char err[512] = "";
  const int rc = pg_load(step, &raw, err, sizeof(err));
  if (rc == PG_NOT_FOUND || rc == PG_NO_AGENT) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of step ", step, " for rank ", shape.rank,
                                            rc == PG_NO_AGENT ? " (no checkpoint store)" : "",
                                            *err != '\0' ? ": " : "", err));
  }
  if (rc != PG_OK || raw == nullptr) {
    return absl::DataLossError(absl::StrCat("checkpoint of step ", step, " for rank ", shape.rank,
                                            " cannot be loaded: ", err));
  }
  std::unique_ptr<pg_shard, ShardCloser> shard(raw);
  std::vector<absl::Span<const uint8_t>> segments;
  for (uint32_t i = 0; i < pg_shard_segment_count(shard.get()); ++i) {
    uint64_t length = 0;
    const void* bytes = pg_shard_segment(shard.get(), i, &length);
    segments.emplace_back(static_cast<const uint8_t*>(bytes), length);
  }
  absl::StatusOr<TrainState> state = DecodeTrainState(shape, step, segments);
  if (!state.ok()) {
    return absl::Status(state.status().code(), absl::StrCat("checkpoint of step ", step, " for rank ",
                                                            shape.rank, ": ", state.status().message()));
  }
  return state;
}

}  // namespace peregrine::sim
