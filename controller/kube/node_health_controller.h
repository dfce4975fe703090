// NodeHealthController: the node health lifecycle (controller/core/node_lifecycle.h) on the
// Nodes of a Kubernetes cluster. The record lives on the Node (the peregrine.dev/health
// label and annotations, EncodeNodeHealth); every change is a JSON merge patch of the
// Node conditioned on the resourceVersion it read (409: read again and step again), made
// together with the actions the step asks for:
//   - cordon + taint: spec.unschedulable=true, the taint peregrine.dev/quarantined:NoSchedule,
//     the cordon's own label peregrine.dev/quarantined=<short reason> with the full reason
//     in peregrine.dev/quarantine-reason, and peregrine.dev/cordoned-before="true" when the
//     Node was already unschedulable by someone else's hand;
//   - uncordon + untaint: the taint and the cordon's label/annotations removed, and
//     spec.unschedulable cleared unless the cordon was someone else's (cordoned-before);
//   - start a sweep: a batch/v1 Job (SweepJobName(node, attempt), so a repeat creates
//     nothing new) in the sweep namespace, pinned to the Node, tolerating the quarantine
//     taint and node.kubernetes.io/unschedulable, running peregrine-diagnose's checks
//     (node_health_inputs.h SweepChecks) from the sweep image; the sweep has started once
//     its pod runs (or the Job finished); a pod stuck Pending (PodStuckReason: unschedulable,
//     the image cannot be pulled, ...) or a Job the API server refuses means it could not
//     start (the Job is deleted and retried later, same attempt); the Job's completion is
//     the sweep's result. Without a sweep image no sweep starts;
//   - an Event on the Node for every transition (reason and message from the step).
// Pass() (run every `resync` and on Node changes by Start()'s thread) decodes the
// labelled Nodes (a record that does not decode gets a Warning Event
// NodeHealthRecordInvalid naming the key and the Node is left as it is), applies an
// operator's return (kNodeHealthReturnAnnotation), restores the cordon and taint of an
// out-of-service Node someone uncordoned or untainted (DesiredNodeState; Warning Event
// NodeQuarantineRestored), watches running sweeps' Jobs and steps every record whose
// timers are due (ListDueWork). Only the leader acts (`may_write`).
//
// Thread-safe: Apply, Quarantine and Pass serialize on one mutex. The client, informer,
// recorder and clock must outlive the controller.
#ifndef PEREGRINE_CONTROLLER_KUBE_NODE_HEALTH_CONTROLLER_H_
#define PEREGRINE_CONTROLLER_KUBE_NODE_HEALTH_CONTROLLER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/core/node_lifecycle.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

// The label every sweep Job and its pod carry: the Job's name.
inline constexpr char kSweepJobLabel[] = "peregrine.dev/sweep";
// The annotations of a sweep Job: the Node it sweeps and the attempt.
inline constexpr char kSweepNodeAnnotation[] = "peregrine.dev/sweep-node";
inline constexpr char kSweepAttemptAnnotation[] = "peregrine.dev/sweep-attempt";
// The annotation the cordon sets when the Node was already unschedulable.
inline constexpr char kCordonedBeforeAnnotation[] = "peregrine.dev/cordoned-before";
// An operator's return: set it (any value: a note) on a quarantined, sweeping or retired
// Node and the next pass returns the machine to service (NodeInputKind::kOperatorReturn:
// healthy, failures forgotten, uncordon + untaint) and removes the annotation.
inline constexpr char kNodeHealthReturnAnnotation[] = "peregrine.dev/health-return";

struct NodeHealthControllerOptions {
  NodeLifecycleOptions lifecycle;
  // The image sweep Jobs run (the agent image: /opt/peregrine/bin/peregrine-diagnose and its
  // tools). Empty: sweeps are off; quarantined machines stay quarantined (nothing starts
  // their sweeps) and running ones are still watched to their end.
  std::string sweep_image;
  std::string sweep_namespace = "default";  // where sweep Jobs run
  std::string diagnose_path = "/opt/peregrine/bin/peregrine-diagnose";  // in the sweep image
  absl::Duration resync = absl::Seconds(10);
  // Whether this replica may act (the leader); null: always.
  std::function<bool()> may_write;
  // Called after each pass with the machines per state (CountNodeHealth's order).
  std::function<void(const std::array<int64_t, kNodeHealthStates>&)> on_counts;
};

// "pg-sweep-<node, cut to fit>-<8 hex of its hash>-<attempt>": a valid Job name (at most 63
// characters of [a-z0-9-]) unique per (node, attempt).
std::string SweepJobName(const std::string& node, int attempt);

// The sweep Job for attempt `attempt` of kind `kind` on Node `node` (which has `gpus`
// allocatable nvidia.com/gpu; 0: none requested).
nlohmann::json BuildSweepJob(const NodeHealthControllerOptions& options, const std::string& node, int attempt,
                             SweepKind kind, int64_t gpus);

// The shell script a sweep pod runs: each check of SweepChecks(kind) through
// peregrine-diagnose at `diagnose_path`; exit 0 iff every check's result says passed, and,
// with `gpus` > 0, the GEMM check found a CUDA device (not_present is a failure there).
std::string SweepScript(const std::string& diagnose_path, SweepKind kind, int64_t gpus);

class NodeHealthController {
 public:
  NodeHealthController(kube::RestClient* client, kube::Informer* nodes, kube::EventRecorder* events, Clock* clock,
                       NodeHealthControllerOptions options);
  ~NodeHealthController();  // Stop()s
  NodeHealthController(const NodeHealthController&) = delete;
  NodeHealthController& operator=(const NodeHealthController&) = delete;

  // Steps Node `node`'s record with `input` at the clock's now and carries out the
  // actions (and the sweep inputs they lead to). A Node that is gone is OK; a record that
  // does not decode: FailedPrecondition naming the key (and the Event); API errors as the
  // client's; kUnavailable when this replica may not write.
  absl::Status Apply(const std::string& node, const NodeInput& input);
  // Cluster::QuarantineMachine: Apply(QuarantineInput(machine_id, reason, now)). A record
  // that does not decode still gets the Node cordoned and tainted (the machine is evicted
  // for a fault), the record's keys left as they are.
  absl::Status Quarantine(const std::string& machine_id, const std::string& reason);
  // One pass over the cached Nodes (see the file comment). Returns the first error.
  absl::Status Pass();
  // The machines per state at the last pass.
  std::array<int64_t, kNodeHealthStates> Counts();

  // Runs Pass() every `resync` and soon after a Node changes, on a thread. Stop joins it.
  void Start();
  void Stop();

 private:
  struct SweepObservation;
  absl::Status ApplyLocked(const std::string& node, NodeInput input, bool cordon_on_invalid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a due sweep's Job says: started, could not start, or nothing yet (nullopt).
  absl::StatusOr<std::vector<NodeInput>> StartSweep(const nlohmann::json& node, const NodeAction& action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A running sweep's result (passed/failed), or nothing yet.
  absl::StatusOr<std::optional<NodeInput>> ObserveSweep(const NodeHealthRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cordons and taints Node `node` again (level-based repair of an out-of-service record).
  absl::Status RestoreQuarantineLocked(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RecordNodeEvent(const std::string& node, bool warning, const std::string& reason,
                               const std::string& message);
  int64_t NowNs();
  void Run();

  kube::RestClient* const client_;
  kube::Informer* const nodes_;
  kube::EventRecorder* const events_;
  Clock* const clock_;
  const NodeHealthControllerOptions options_;

  absl::Mutex mu_;
  std::array<int64_t, kNodeHealthStates> counts_ ABSL_GUARDED_BY(mu_) = {};

  absl::Mutex run_mu_;
  absl::CondVar run_cv_;
  bool stopping_ ABSL_GUARDED_BY(run_mu_) = false;
  bool poke_ ABSL_GUARDED_BY(run_mu_) = false;
  std::thread thread_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_NODE_HEALTH_CONTROLLER_H_
