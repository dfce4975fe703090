// The agent's components built from AgentOptions: the fail-slow monitor (where its
// NCCL rings live), the machine inspections (with the stand-in machine in local
// mode), the diagnostic runner's options and requests, the in-memory checkpoints'
// options and the processes of a training start. Called once at start-up from the
// agent's constructor thread. Errors: the status of the step that failed.
#ifndef PEREGRINE_AGENT_AGENT_COMPONENTS_H_
#define PEREGRINE_AGENT_AGENT_COMPONENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent.h"
#include "agent/checkpoint/agent_checkpoints.h"
#include "agent/checkpoint/shard_store.h"
#include "agent/command_state.h"
#include "agent/diagnostics/diagnostic_runner.h"
#include "agent/failslow_monitor.h"
#include "agent/inspection_runner.h"
#include "agent/supervisor.h"
#include "agent/training_assignment.h"

namespace peregrine {

// Null when options.nccl_hook is empty (no hook, nothing to monitor).
absl::StatusOr<std::unique_ptr<FailSlowMonitor>> CreateFailSlowMonitor(const AgentOptions& options);
// The processes of `assignment` (agent/launch_plan.h) with the agent's environment,
// the NCCL hook's when `failslow` is set (whose rings it resets for the new run, with
// detectors built from the assignment's spec.failSlow settings: DetectorOptionsFor), and
// the checkpoint store's directories and allowance when `store` is set. Fails with
// kInvalidArgument when those settings are out of range.
absl::StatusOr<std::vector<ProcessSpec>> PrepareLaunch(const AgentOptions& options,
                                                       const TrainingAssignment& assignment,
                                                       FailSlowMonitor* failslow,
                                                       const checkpoint::ShardStore* store = nullptr);

// The fail-slow detector settings of a launch: `base` with the assignment's
// changePointProbability (the BOCPD posterior to report) and verifyThreshold where set.
FailSlowDetectorOptions DetectorOptionsFor(const TrainingAssignment& assignment,
                                           FailSlowDetectorOptions base = {});

// The in-memory checkpoints' options (agent/checkpoint/agent_checkpoints.h) from the
// agent's: its root, job and pod, token file, data channel and clock.
checkpoint::AgentCheckpointsOptions CheckpointOptionsFor(const AgentOptions& options);
// The slot of `assignment` in the checkpoint store's terms.
checkpoint::CheckpointLaunch CheckpointLaunchFor(const TrainingAssignment& assignment);
// options.client_dir, else the parent of this binary's directory (bin/.. in the build tree).
std::string ClientDirFor(const AgentOptions& options);
// Null when options.inspections is off.
absl::StatusOr<std::unique_ptr<InspectionRunner>> CreateInspectionRunner(const AgentOptions& options);
// peregrine-diagnose next to this binary unless named; its scratch directory; RunTool as spawner.
DiagnosticRunnerOptions DiagnosticRunnerOptionsFor(const AgentOptions& options);
// The runner's request for the state machine's task on this machine.
DiagnosticRunRequest MakeDiagnosticRequest(const std::string& command_id, const std::string& machine_id,
                                        const DiagnosticTask& task);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_AGENT_COMPONENTS_H_
