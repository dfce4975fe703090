// TrainingJobReconciler: reconciles one TrainingJob key ("namespace/name") per call, the
// way controller-runtime's Reconcile does: it reads the object from the informer cache,
// acts (finalizer, teardown, Valid=False for a spec no cluster can run, one round of the
// job's JobController) and returns what the work queue should do next as a
// kube::ReconcileResult or an error whose code says it (reconcile_result.h). It never
// touches the queue. It is also the JobDirectory the HTTP API reads (the jobs this
// replica reconciles). The steps are described in trainingjob_reconciler.cc.
//
// Thread-safe; Reconcile must not run concurrently for one key (the WorkQueue
// guarantees it). Everything in Deps must outlive it.
#ifndef PEREGRINE_CONTROLLER_KUBE_TRAININGJOB_RECONCILER_H_
#define PEREGRINE_CONTROLLER_KUBE_TRAININGJOB_RECONCILER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/controller_metrics.h"
#include "controller/core/decision_engine.h"
#include "controller/http_server.h"
#include "controller/kube/informer.h"
#include "controller/kube/kube_cluster.h"
#include "controller/kube/reconcile_result.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

class TrainingJobReconciler final : public JobDirectory {
 public:
  struct Deps {
    kube::RestClient* client = nullptr;
    kube::Informer* jobs = nullptr;  // the TrainingJob cache
    KubeCluster* cluster = nullptr;
    AgentRegistry* registry = nullptr;
    ControllerMetrics* metrics = nullptr;
    std::function<bool()> is_leader;  // false: act on nothing
    Clock* clock = RealClock();       // the time of decisions and conditions
  };
  struct Options {
    absl::Duration resync = absl::Seconds(10);  // a clean round looks again at least this often
    DecisionConfig decision;
  };

  TrainingJobReconciler(Deps deps, Options options);
  ~TrainingJobReconciler() override;

  // Reconciles `key`. The result, or the error's code, tells the caller what to do with
  // the key (kube::ApplyReconcileResult): kInvalidArgument means the job was marked
  // Valid=False (InvalidSpec or PodRejected) and waits for its spec to change; other
  // errors are retried with backoff.
  absl::StatusOr<kube::ReconcileResult> Reconcile(const std::string& key);
  // Stops every job's controller (shutdown); the pods keep running.
  void StopAll();

  // JobDirectory (http_server.h): the jobs this replica reconciles right now.
  void ForEachJob(const std::function<void(JobController&)>& fn) override;
  bool WithJob(const std::string& ns, const std::string& name, const std::function<void(JobController&)>& fn) override;
  absl::StatusOr<std::string> UpdateCode(const std::string& ns, const std::string& name,
                                         const CodeUpdateRequest& request) override;

 private:
  struct JobEntry;
  struct Round;

  absl::StatusOr<kube::ReconcileResult> ReconcileJob(const std::string& key, const nlohmann::json& object);
  Round RunRound(JobEntry& entry);
  absl::StatusOr<kube::ReconcileResult> Terminal(const std::string& key, const nlohmann::json& object,
                                                 const absl::Status& why, const char* reason);
  absl::Status MarkInvalid(const nlohmann::json& object, const absl::Status& why, const char* reason);
  absl::Status UpdateFinalizers(const nlohmann::json& object, bool add);
  absl::Status TearDown(const std::string& key, const nlohmann::json& object);
  JobEntry* FindEntry(const std::string& key);
  void RemoveEntry(const std::string& key);
  void ForgetJob(const std::string& key);
  void CountConnectedAgents(const std::string& key);

  const Deps deps_;
  const Options options_;
  // Each key is reconciled by one worker at a time, so an entry is used without the map
  // lock; the lock guards the map's shape.
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobEntry>> entries_ ABSL_GUARDED_BY(mu_);
  // Jobs whose pods the API server refused for good: key -> "<uid>/<generation>". The
  // status says so too (Valid=False PodRejected), but the cache can lag behind this
  // replica's write.
  std::map<std::string, std::string> rejected_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> connected_agents_ ABSL_GUARDED_BY(mu_);  // job key -> count
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_TRAININGJOB_RECONCILER_H_
