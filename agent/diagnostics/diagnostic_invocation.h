// What peregrine-diagnose knows when it runs one diagnostic, and helpers shared by the kinds.
//
// A DiagnosticInvocation is built from the helper's flags (agent/diagnostics/diagnose_main.cc):
// the kind and params, the deadline, this machine's identity and GPUs, the base environment
// of the processes it starts (the agent's: LD_LIBRARY_PATH, PEREGRINE_STANDIN_DEVICE, PATH...)
// and the job's training command (for replay).
//
// Thread-compatible value types; the helpers are pure except ToolPath (file system).
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_INVOCATION_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_INVOCATION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/diagnostics/diagnostic_params.h"
#include "base/clock.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

struct DiagnosticInvocation {
  std::string kind;
  DiagnosticParamMap params;
  absl::Duration timeout = absl::Minutes(1);
  absl::Time deadline = absl::InfiniteFuture();
  Clock* clock = RealClock();  // the time of `deadline` and of every wait (must outlive the run)
  std::string machine_id;
  int gpus = 1;
  int rank_base = 0;
  std::string tools_dir;  // where peregrine-gemm, peregrine-nccl-check, sim-trainer are
  std::map<std::string, std::string> env;  // the base environment of started processes
  std::vector<std::string> command;        // the job's training command
  std::map<std::string, std::string> code_env;

  DiagnosticParams Params() const { return DiagnosticParams(kind, params); }
  // True inside the stand-in cluster (a stand-in device plugged in: env
  // PEREGRINE_STANDIN_DEVICE set, diagnosis/tools/standin_device.h).
  bool InStandInCluster() const;
  // The machine id as the stand-in fault table keys it (-1 when not an integer).
  int SimMachineNumber() const;
  // "timed out after N ms".
  std::string TimedOutDetail() const;
};

// The environment of the processes a diagnostic starts: the agent's, then the job's code
// env (as training gets it: the job's LD_LIBRARY_PATH, NCCL_* settings...). Callers add the
// per-rank variables.
std::map<std::string, std::string> TrainingEnvironment(const DiagnosticInvocation& inv);

// The NCCL world the processes of a kind join, one rank per local GPU: local GPU g is
// communicator rank rank_base + g of `world`, meeting at master_addr:master_port.
struct RankWorld {
  int64_t rank_base = 0;
  int64_t world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// How long the NCCL ranks a kind starts at `now` may wait for their peers: the time left
// until inv.deadline, at least one second.
int64_t NcclTimeoutMs(const DiagnosticInvocation& inv, absl::Time now);

// The environment of local GPU `gpu` as a rank of `world`: TrainingEnvironment(inv) plus
// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (inv.gpus), MASTER_ADDR and
// MASTER_PORT, PEREGRINE_MACHINE_ID and PEREGRINE_NCCL_TIMEOUT_MS (nccl_timeout_ms).
std::map<std::string, std::string> RankEnvironment(const DiagnosticInvocation& inv, const RankWorld& world, int gpu,
                                                   int64_t nccl_timeout_ms);

// `name` in tools_dir when it is there, else on the PATH of `env`; NotFound otherwise.
absl::StatusOr<std::string> ToolPath(const DiagnosticInvocation& inv, const std::string& name);

// "KEY=VALUE" list of an environment map.
std::vector<std::string> FlattenEnv(const std::map<std::string, std::string>& env);

// The result skeleton every kind fills: kind, machine_id, passed=true.
v1::DiagnosticResult NewResult(const DiagnosticInvocation& inv);

// v as 16 hex digits (the digests, base/fnv1a.h).
std::string Hex64(uint64_t v);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_INVOCATION_H_
