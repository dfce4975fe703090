// TrainingAssignment: the agent's own form of the slot the controller gives a
// machine (ranks, layout, rendezvous, attempt, code), used by its command state
// machine. Plain values; agent/proto_translation.h converts them to and from the
// wire. Thread-compatible.
#ifndef PEREGRINE_AGENT_TRAINING_ASSIGNMENT_H_
#define PEREGRINE_AGENT_TRAINING_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace peregrine {

// The code training runs: image (empty in local mode), argv, revision and extra env.
struct TrainingCode {
  std::string image;
  std::vector<std::string> command;
  std::string revision;
  std::map<std::string, std::string> env;

  bool operator==(const TrainingCode&) const = default;
};

// One training process (one GPU) and its coordinates in the parallel layout.
struct AssignedRank {
  uint32_t global_rank = 0;
  uint32_t local_rank = 0;
  uint32_t tp = 0;
  uint32_t pp = 0;
  uint32_t dp = 0;

  bool operator==(const AssignedRank&) const = default;
};

struct AssignedLayout {
  uint32_t tensor = 0;
  uint32_t pipeline = 0;
  uint32_t data = 0;
  uint32_t gpus_per_machine = 0;

  bool operator==(const AssignedLayout&) const = default;
};

struct TrainingAssignment {
  uint32_t machine_index = 0;  // the slot whose ranks this machine holds
  std::vector<AssignedRank> ranks;
  uint32_t world_size = 0;
  AssignedLayout layout;
  std::string master_addr;
  uint32_t master_port = 0;
  uint64_t resume_step = 0;  // training resumes after this completed step
  uint64_t attempt = 0;      // 0: no training attempt
  TrainingCode code;
  // The in-memory checkpoint plan (peregrine.v1.CheckpointPlan) as the controller sent it,
  // serialized; empty: checkpoints off. The agent's checkpoint store reads it.
  std::string checkpoint_plan;
  // spec.failSlow's detector settings (peregrine.v1.FailSlowSettings); 0: the agent's default.
  // Each training launch builds its ranks' fail-slow detectors with them.
  double failslow_change_point_probability = 0;
  double failslow_verify_threshold = 0;

  bool operator==(const TrainingAssignment&) const = default;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_TRAINING_ASSIGNMENT_H_
