// The scenario driver: what the demo (peregrine-controller --local --scenario NAME) and
// the end-to-end tests do to a running local job, step by step, each step when its
// trigger holds: inject faults (FaultInjector grammar) and/or make an urgent code update.
// The scenarios are the stand-in cluster's: they inject faults the stand-in knows how to
// play (sim/fault), so the driver lives with the local mode, never in product code.
//
// Thread-compatible: one RunScenario per LocalMode at a time.
#ifndef PEREGRINE_CONTROLLER_LOCAL_SCENARIO_H_
#define PEREGRINE_CONTROLLER_LOCAL_SCENARIO_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "controller/local/local_mode.h"
#include "proto/api/code_update_request.h"
#include "proto/api/fault_request.h"

namespace peregrine {

// A scenario: what the driver (LocalMode::RunScenario) does to a running job, step by
// step, each step when its trigger holds. A step injects faults (FaultInjector grammar)
// and/or makes an urgent code update (JobController::UpdateJob, as peregrinectl update
// --urgent does).
struct ScenarioStep {
  enum class Trigger {
    // The job is Running and every rank completed Scenario::at_step; a step with a code
    // update also waits until the running version ran healthy (a rollback target exists).
    kAtStep,
    // An incident opened after the previous step (e.g. clear a one-off fault once seen).
    kIncidentOpened,
    // The previous step's machine raised a network alarm (recorded in the job status),
    // its agent reported it and no longer does (the flap episode is over), and the job is
    // Running: a later flap is a separate episode.
    kNetworkAlarmEnded,
  };
  Trigger trigger = Trigger::kAtStep;
  std::vector<FaultRequest> faults;             // injected in order
  std::optional<CodeUpdateRequest> code_update;  // applied as an urgent hot update
};

// Scenarios by name (ScenarioByName): kill-machine (a machine dies mid-training),
// crash (a rank of one machine keeps crashing: the stop-time diagnosis' EUD finds that
// machine, evicted), crash-once (one crash with no culprit: diagnosis passes, a
// reattempt fixes it), code-update-rollback (an urgent update to a broken revision whose
// ranks exit at start-up: diagnosis, reattempt, rollback to the last healthy version,
// the job completes), nan (one machine contributes NaN: the alignment stage of the
// stop-time diagnosis isolates it; needs the agents' diagnostics), sdc (one machine
// silently corrupts its gradients: dual-phase replay finds it), xid (a fatal Xid on one
// machine), nic-flap (one NIC flap: tolerated), nic-flap-twice (a second flap of the same
// NIC once the first episode is over, within the alarm window: evicted),
// failslow-slow-rank (one GPU computes 3x slower), failslow-congested-link (20 ms per
// message between two machines), failslow-rank-and-link (both at once),
// failslow-two-slow-ranks (two GPUs on different machines 3x slower), failslow-jitter
// (every GPU's compute +-5% per iteration: nothing must be reported), hang-pp-stage (a
// machine of the last pipeline stage hangs: stack aggregation evicts its pipeline group).
struct Scenario {
  std::string name;
  uint64_t at_step = 30;  // for kAtStep triggers
  std::vector<ScenarioStep> steps;
};
// kInvalidArgument naming the known scenarios for an unknown name. `job` is the job the
// scenario runs on (machine count; the broken revision derives from its code version).
absl::StatusOr<Scenario> ScenarioByName(const std::string& name, const TrainingJob& job);
// The names ScenarioByName knows, comma-separated (for usage texts).
std::string ScenarioNames();

// What RunScenario did and where the job ended.
struct ScenarioStepRecord {
  JobStatus before;         // the status when the step's trigger held
  std::string description;  // what was injected or updated
};
struct ScenarioRun {
  JobStatus status;   // the status when the run ended
  bool finished = false;  // the job Succeeded or Failed (false: stopped or timed out)
  std::vector<ScenarioStepRecord> steps;  // the applied steps, in order
};
struct ScenarioRunOptions {
  std::function<void(const std::string&)> progress;  // a line per step and per ~20 steps; may be empty
  std::function<bool()> stop_requested;               // polled; true ends the run; may be empty
  int64_t timeout_ms = 600'000;                       // then the run ends unfinished
};
// Drives the job until it finishes (or stop / timeout), applying `scenario`'s steps
// (none when nullopt) as their triggers hold. The job is left as it is (Shutdown is the
// caller's). Errors: a step that cannot be applied (an injection or update refused)
// ends the run with that status, naming the step; the job keeps running.
absl::StatusOr<ScenarioRun> RunScenario(LocalMode& mode, const std::optional<Scenario>& scenario,
                                        const ScenarioRunOptions& options);
}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_SCENARIO_H_
