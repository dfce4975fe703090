// LocalMode: the embedded local cluster end to end in one process: the gRPC agent service,
// the local cluster of agent processes, the job controller, the HTTP endpoint and fault
// injection. peregrine-controller --local and the end-to-end tests both drive it (the
// scenario driver, scenario.h, runs on top), so what the demo shows is what the tests
// assert.
//
// Thread-safe: Start once, then any method from any thread; Shutdown is idempotent.
#ifndef PEREGRINE_CONTROLLER_LOCAL_LOCAL_MODE_H_
#define PEREGRINE_CONTROLLER_LOCAL_LOCAL_MODE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "controller/local/fault_injector.h"
#include "controller/job_controller.h"
#include "controller/core/job_spec.h"

namespace peregrine {

struct LocalModeOptions {
  std::string state_dir;    // persisted state: token, ports, pods, status, logs
  std::string bin_dir;      // where peregrine-agent and sim-trainer are
  std::string host = "127.0.0.1";
  int grpc_port = 0;        // 0: reuse the persisted port, else pick one and persist it
  int http_port = 0;        // 0: pick one
  int heartbeat_ms = 500;
  // host:port the agents dial; empty: the controller's own gRPC address. A test points it
  // at a proxy in front of grpc_port to cut the agents' link (tests/testing/tcp_proxy.h).
  std::string agent_controller_address;
  // Where the agents keep in-memory checkpoints. Empty: /dev/shm/peregrine-local-<uid>-<a
  // hash of state_dir> (or <state_dir>/shm without /dev/shm), linked as <state_dir>/shm.
  // Removed by Shutdown(true).
  std::string checkpoint_root;
  Clock* clock = RealClock();  // the time source of the controller (must outlive the mode)
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
  // The job's agents as the registry sees them now (connected or not).
  std::vector<AgentObservation> ObserveAgents();
  // Stops serving. teardown=true also stops every pod; false leaves training running
  // (a controller restart picks it up again).
  void Shutdown(bool teardown);

  struct Impl;

 private:
  explicit LocalMode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The readable timeline: one line per entry, seconds relative to `origin`, then a summary.
std::string FormatTimeline(const std::vector<TimelineEntry>& timeline, const JobStatus& status, int64_t origin);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_LOCAL_MODE_H_
