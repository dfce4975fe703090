// LocalMode: the embedded local cluster end to end in one process: the gRPC agent service,
// the local cluster of agent processes, the job controller, the HTTP endpoint, fault
// injection and the demo scenarios. peregrine-controller --local and the end-to-end tests
// both drive it, so what the demo shows is what the tests assert.
//
// Thread-safe: Start once, then any method from any thread; Shutdown is idempotent.
#ifndef PEREGRINE_CONTROLLER_LOCAL_MODE_H_
#define PEREGRINE_CONTROLLER_LOCAL_MODE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "controller/fault_injector.h"
#include "controller/job_controller.h"
#include "controller/job_spec.h"

namespace peregrine {

struct LocalModeOptions {
  std::string state_dir;    // persisted state: token, ports, pods, status, logs
  std::string bin_dir;      // where peregrine-agent and sim-trainer are
  std::string host = "127.0.0.1";
  int grpc_port = 0;        // 0: reuse the persisted port, else pick one and persist it
  int http_port = 0;        // 0: pick one
  int heartbeat_ms = 500;
  DecisionConfig decision;
};

class LocalMode {
 public:
  static absl::StatusOr<std::unique_ptr<LocalMode>> Start(const TrainingJob& job, LocalModeOptions options);
  ~LocalMode();

  JobController& controller();
  LocalCluster& cluster();
  int grpc_port() const;
  int http_port() const;
  absl::StatusOr<std::string> Inject(const FaultRequest& request);
  // Stops serving. teardown=true also stops every pod; false leaves training running
  // (a controller restart picks it up again).
  void Shutdown(bool teardown);

  struct Impl;

 private:
  explicit LocalMode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A demo scenario by name: what to inject and when. Names: kill-machine (a machine dies
// mid-training), crash (a rank keeps crashing with no machine at fault: diagnosis,
// reattempt, rollback, replay), crash-once (one crash with no culprit: diagnosis passes, a
// reattempt fixes it), nan (one machine contributes NaN: the alignment stage of the
// stop-time diagnosis isolates it; needs the agents' diagnostics), xid (a fatal Xid on one
// machine), nic-flap (one NIC flap), failslow-slow-rank (one GPU computes 3x slower),
// failslow-congested-link (20 ms per message between two machines), failslow-rank-and-link
// (both at once), failslow-two-slow-ranks (two GPUs on different machines 3x slower),
// failslow-jitter (every GPU's compute +-5% per iteration: nothing must be reported),
// hang-pp-stage (a machine of the last pipeline stage hangs: stack aggregation evicts its
// pipeline group).
struct Scenario {
  std::string name;
  uint64_t at_step = 30;
  FaultRequest fault;
  std::vector<FaultRequest> more_faults;  // injected right after `fault`
  bool clear_on_incident = false;  // one-off: the driver clears the fault once the incident opened
};
absl::StatusOr<Scenario> ScenarioByName(const std::string& name, int machines);

// The readable timeline: one line per entry, seconds relative to `origin`, then a summary.
std::string FormatTimeline(const std::vector<TimelineEntry>& timeline, const JobStatus& status, int64_t origin);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_MODE_H_
