// LaunchPlan: turns an Assignment into the ProcessSpecs the Supervisor starts.
//
// One process per GPU (per RankInfo), each with the environment torchrun gives its
// workers, so a script written for torchrun runs unchanged without it. Each process gets
// the agent's environment, then assignment.code.env, then (overriding both):
//   torchrun's worker contract: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
//   (= ranks on this machine), GROUP_RANK (= machine_index), GROUP_WORLD_SIZE (= NNODES),
//   ROLE_RANK (= RANK), ROLE_WORLD_SIZE (= WORLD_SIZE), ROLE_NAME=default, MASTER_ADDR,
//   MASTER_PORT, TORCHELASTIC_RESTART_COUNT (= attempt - 1, 0 for attempt 0),
//   TORCHELASTIC_RUN_ID (context.run_id), TORCHELASTIC_MAX_RESTARTS (context.max_restarts:
//   the assignment carries no reattempt limit, so the agent passes 0);
//   NODE_RANK (= machine_index), NNODES (= world_size / gpus_per_machine);
//   PEREGRINE_TP/PP/DP (layout sizes), PEREGRINE_TP_RANK/PP_RANK/DP_RANK,
//   PEREGRINE_RESUME_STEP, PEREGRINE_ATTEMPT, PEREGRINE_MACHINE_ID;
//   with a client dir: PEREGRINE_CLIENT_LIB (<dir>/lib/libperegrine_client.so) and PYTHONPATH
//   prefixed with <dir>/python (the `peregrine` package); when the assignment's checkpoint
//   plan has interval_steps > 0 and a checkpoint area is set: PEREGRINE_CHECKPOINT_DIR
//   (<area>/own/rank-<g>), PEREGRINE_CHECKPOINT_INTERVAL, PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES;
//   with a micro-batch plan path: PEREGRINE_MICROBATCH_PLAN (agent/microbatch_plan_file.h).
//
// Pure: the agent's environment and paths are inputs. Thread-compatible.
#ifndef PEREGRINE_AGENT_LAUNCH_PLAN_H_
#define PEREGRINE_AGENT_LAUNCH_PLAN_H_

#include <cstdint>
#include <map>
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
  std::string run_id;                  // TORCHELASTIC_RUN_ID: the job, "<namespace>/<name>"
  int64_t max_restarts = 0;            // TORCHELASTIC_MAX_RESTARTS
  std::string client_dir;              // holds lib/libperegrine_client.so and python/peregrine/
  std::string checkpoint_area;         // the agent's checkpoint store area; empty: none
  uint64_t checkpoint_allowance = 0;   // PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES
  std::string microbatch_plan_path;    // PEREGRINE_MICROBATCH_PLAN; empty: not set
};

// One worker of a torchrun-style world: what torchrun's rendezvous variables say.
struct TorchrunWorker {
  int64_t rank = 0;
  int64_t local_rank = 0;
  int64_t world_size = 1;
  int64_t local_world_size = 1;
  std::string master_addr;
  int64_t master_port = 0;
};

// Sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT of
// `worker` in *env (the variables every process of a torchrun world reads; the launch
// plan and the diagnostics' rank processes both set them here).
void SetTorchrunWorker(const TorchrunWorker& worker, std::map<std::string, std::string>* env);

// InvalidArgument naming the field when the assignment cannot be launched
// (empty command, no ranks, inconsistent layout, rank outside the world).
absl::StatusOr<std::vector<ProcessSpec>> BuildLaunchPlan(const peregrine::v1::Assignment& assignment,
                                                         const LaunchContext& context);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_LAUNCH_PLAN_H_
