// LaunchPlan: turns an Assignment into the ProcessSpecs the Supervisor starts.
//
// Launch mode today is one process per GPU (per RankInfo). Each process gets
// the agent's environment, then assignment.code.env, then (overriding both):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (= ranks on this machine),
//   NODE_RANK (= machine_index), NNODES (= world_size / gpus_per_machine),
//   MASTER_ADDR, MASTER_PORT, PEREGRINE_TP/PP/DP (layout sizes),
//   PEREGRINE_TP_RANK/PP_RANK/DP_RANK, PEREGRINE_RESUME_STEP, PEREGRINE_ATTEMPT,
//   PEREGRINE_MACHINE_ID.
// A per-machine launcher mode (one torchrun-like process, global_rank -1, no
// per-rank variables) would be one more branch in BuildLaunchPlan producing a
// single spec from MachineEnvironment().
//
// Pure: the agent's environment and paths are inputs. Thread-compatible.
#ifndef PEREGRINE_AGENT_LAUNCH_PLAN_H_
#define PEREGRINE_AGENT_LAUNCH_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/supervisor.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

struct LaunchContext {
  std::vector<std::string> agent_env;  // "KEY=VALUE", e.g. from environ
  std::string machine_id;
  std::string log_dir;                 // empty: no log files
  std::string started_at;              // human-readable, for the log separator
};

// InvalidArgument naming the field when the assignment cannot be launched
// (empty command, no ranks, inconsistent layout, rank outside the world).
absl::StatusOr<std::vector<ProcessSpec>> BuildLaunchPlan(const peregrine::v1::Assignment& assignment,
                                                         const LaunchContext& context);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_LAUNCH_PLAN_H_
