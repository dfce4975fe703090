// LocalNodeHealth: the node health lifecycle (controller/core/node_lifecycle.h) on the local
// cluster's machines. The records are persisted in <state_dir>/node-health.json (each
// machine's record as the label and annotations EncodeNodeHealth gives a Node, so the two
// modes share one format), rewritten atomically (temp file, fsync, rename) after every
// change and before the change's actions run: a controller killed at any point restarts
// from a record that is either the old or the new one, never a torn one.
//
// Actions: cordon + taint is the LocalCluster's quarantine (the machine leaves the pool);
// uncordon + untaint calls `on_returned` (the LocalCluster takes the machine back as a
// free machine: its next pod, a standby first, runs there); a sweep runs each check of
// SweepChecks(kind) as a local peregrine-diagnose process for that machine id with the
// stand-in device's environment, and its results (JudgeDiagnoseOutput) are the sweep's;
// events are appended to <state_dir>/events.log. A sweep runs to its end inside Pass(): a
// record found sweeping when the state is loaded was interrupted by a controller exit and
// counts as a failed sweep ("interrupted"), with its back-off.
//
// Thread-safe (one mutex; Pass holds it while a sweep runs).
#ifndef PEREGRINE_CONTROLLER_LOCAL_LOCAL_NODE_HEALTH_H_
#define PEREGRINE_CONTROLLER_LOCAL_LOCAL_NODE_HEALTH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/core/node_lifecycle.h"

namespace peregrine {

struct LocalNodeHealthOptions {
  std::string state_dir;        // must exist
  std::string diagnose_binary;  // peregrine-diagnose
  // The sweep processes' environment on top of the controller's (the pods' stand-in
  // device: PEREGRINE_SIM_FAULTS, PEREGRINE_STANDIN_DEVICE, PATH).
  std::map<std::string, std::string> env;
  int gpus_per_machine = 1;
  absl::Duration check_timeout = absl::Minutes(5);  // one peregrine-diagnose run
  NodeLifecycleOptions lifecycle;
  Clock* clock = RealClock();  // the lifecycle's time (must outlive the object)
  // The machine passed its sweep (or was returned): it may run pods again.
  std::function<void(const std::string& machine)> on_returned;
};

class LocalNodeHealth {
 public:
  // Loads <state_dir>/node-health.json if it exists. DataLossError naming the machine and
  // the key for a record that does not decode; InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<LocalNodeHealth>> Create(LocalNodeHealthOptions options);

  // Steps `machine`'s record with `input` at the clock's now and carries out the actions.
  absl::Status Apply(const std::string& machine, const NodeInput& input);
  // Cluster::QuarantineMachine: Apply(QuarantineInput(machine, reason, now)), except that
  // the sweep it makes due is left to the next Pass.
  absl::Status Quarantine(const std::string& machine, const std::string& reason);
  // Steps every record whose timers are due now (ListDueWork): due sweeps run here.
  absl::Status Pass();
  // Stops a sweep that is running (its check's process group is killed within a second)
  // and every later one: for shutdown. The interrupted sweep records no result; its
  // record stays sweeping, which the next load counts as an interrupted, failed sweep.
  // Callable from any thread.
  void Cancel();

  std::vector<NodeHealthRecord> Records();
  std::array<int64_t, kNodeHealthStates> Counts();

 private:
  explicit LocalNodeHealth(LocalNodeHealthOptions options) : options_(std::move(options)) {}
  // Sweeps run only with `run_sweeps` (Apply, Pass; not Quarantine, which the job
  // controller's loop calls).
  absl::Status ApplyLocked(const std::string& machine, NodeInput input, bool run_sweeps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the sweep's checks; the input they amount to (passed / failed), or nullopt when
  // Cancel() interrupted it.
  std::optional<NodeInput> RunSweep(const std::string& machine, SweepKind kind, int attempt);
  void Log(const std::string& line);

  const LocalNodeHealthOptions options_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::map<std::string, NodeHealthRecord> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_LOCAL_NODE_HEALTH_H_
