// JobController: runs one TrainingJob's control loop. Each round it observes the cluster
// (pods) and the agents (registry), calls the pure DecideJob, applies the plan (pods,
// commands, events), publishes the desired agent states and persists the status when it
// changed. Crash consistency (docs/kubernetes.md): the decided status is written BEFORE
// any action (pods, commands, cordons) and every action is re-derived from the written
// status and the observations, idempotently, so a controller killed at any point resumes
// without acting twice; a round whose status write fails acts on nothing and is retried
// (100 ms doubling to 10 s). A round runs when something changed (an agent message, a pod
// event), when the plan asked to look again, or every `resync` otherwise. A machine the
// plan evicts is quarantined through the cluster (Kubernetes: the node is cordoned) after
// the eviction is written, and marked done (Eviction::quarantined) by a second write, so a
// restart retries what failed. Errors from the cluster are kept in the status' last error
// and retried with backoff; they never stop the loop.
//
// The job can be replaced while it runs (UpdateJob: a hot code update from peregrinectl, or
// any other spec change); the next round decides from the new spec and generation.
//
// Thread-safe: Start/Stop/Wake/Snapshot/UpdateJob/job may be called from any thread;
// rounds run on the controller's own thread. The cluster, registry and metrics must
// outlive it.
#ifndef PEREGRINE_CONTROLLER_JOB_CONTROLLER_H_
#define PEREGRINE_CONTROLLER_JOB_CONTROLLER_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/cluster.h"
#include "controller/controller_metrics.h"
#include "controller/core/decision_engine.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

// One line of the human-readable incident timeline.
struct TimelineEntry {
  int64_t at = 0;
  std::string what;
};

class JobController {
 public:
  struct Options {
    int64_t resync_ns = 200'000'000;
    DecisionConfig decision;
    Clock* clock = RealClock();  // the time of every decision and timeline entry
  };

  JobController(TrainingJob job, Cluster* cluster, AgentRegistry* registry, ControllerMetrics* metrics,
                Options options);
  ~JobController();

  // Loads a persisted status (a controller restart continues where it was) and, when
  // run_loop, starts the loop thread. Without it the caller drives ReconcileOnce() (e.g. a
  // Kubernetes work-queue worker).
  absl::Status Start(bool run_loop = true);
  // What one round did. Every error of the round is also kept in the status' last error
  // and the round's actions are retried by later rounds.
  struct RoundResult {
    int64_t requeue_after_ns = 0;  // when to look again (0: resync)
    absl::Status error;            // the round's first error (OK when none)
    absl::Status pod_rejected;     // the first pod the cluster refused for good (kInvalidArgument)
    // The status (intent) write failed: the round did nothing else, the status stays the
    // last written one and requeue_after_ns is the write's retry delay (100 ms doubling up
    // to 10 s). kNotFound: the job is gone or was re-created (another uid).
    absl::Status status_write;
  };
  // One round: observe, decide, apply, persist. Must not be called concurrently with
  // itself or with the loop thread.
  RoundResult ReconcileOnce();
  void Stop();
  void Wake();

  JobStatus Snapshot() const;
  // A copy of the job as the controller currently runs it (the last accepted update).
  TrainingJob job() const;
  const std::string& key() const { return key_; }

  // Replaces the running job with `updated` (e.g. a new spec.codeVersion plus the
  // peregrine.dev/hot-update annotation): it must name the same job (namespace, name and,
  // when both are set, uid) and pass ValidateTrainingJob. On success
  // metadata.generation becomes the current generation + 1 (whatever `updated` says), the
  // agents' binding gets the new spec, a timeline entry is added and a round is woken;
  // the decision engine then applies the change (an urgent code update restarts in place,
  // a lazy one waits for the next failure or its window). On failure (kInvalidArgument
  // naming the field, or the identity mismatch) nothing changes. Returns the accepted
  // generation.
  absl::StatusOr<int64_t> UpdateJob(TrainingJob updated);
  std::vector<TimelineEntry> Timeline() const;
  // Adds an entry to the timeline (fault injection from the local driver or peregrinectl).
  void Note(const std::string& what);
  // Blocks until `pred(status)` holds or the timeout passes; true if it held.
  bool WaitFor(const std::function<bool(const JobStatus&)>& pred, int64_t timeout_ms) const;

 private:
  void Loop();

  const std::string key_;  // namespace/name: never changes
  Cluster* cluster_;
  AgentRegistry* registry_;
  ControllerMetrics* metrics_;
  const Options options_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stop_ = false;
  bool wake_ = false;
  TrainingJob job_;  // guarded by mu_; replaced only by UpdateJob
  JobStatus status_;
  std::vector<TimelineEntry> timeline_;
  std::string last_error_;
  int failed_writes_ = 0;  // status writes failed in a row (rounds are serial)
  std::thread thread_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_JOB_CONTROLLER_H_
