// ControllerMetrics: the controller's Prometheus metrics (prometheus-cpp), named by the
// Prometheus conventions: peregrine_ prefix, base units, _total counters, labels job and
// namespace, no unbounded label values (incident kinds and eviction reasons are fixed sets).
// The chart's alert rules (helm/peregrine/files/alerts.yaml) use these names.
//
// Thread-safe (prometheus-cpp metrics are atomic; the job bookkeeping takes a lock).
#ifndef PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_
#define PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "controller/job_state.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace peregrine {

class ControllerMetrics {
 public:
  ControllerMetrics();

  // The text exposition format (what /metrics serves).
  std::string Serialize() const;
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Updates the job's gauges and counts what changed between two statuses.
  void ObserveJob(const std::string& ns, const std::string& job, const JobStatus& before, const JobStatus& after);
  void ObserveReconcile(double seconds, bool error);
  void SetLeader(bool leader);
  void SetAgentsConnected(int n);
  void SetWorkQueueDepth(int n);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& machines_;
  prometheus::Family<prometheus::Gauge>& standby_desired_;
  prometheus::Family<prometheus::Gauge>& standby_ready_;
  prometheus::Family<prometheus::Counter>& incidents_;
  prometheus::Family<prometheus::Counter>& evictions_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& time_lost_;
  prometheus::Family<prometheus::Gauge>& last_step_;
  prometheus::Family<prometheus::Gauge>& ettr_;
  prometheus::Family<prometheus::Gauge>& iteration_seconds_;
  prometheus::Family<prometheus::Counter>& failslows_;  // localized fail-slows by kind
  prometheus::Family<prometheus::Counter>& diagnosis_stages_;  // stop-time diagnosis stages finished
  prometheus::Histogram& reconcile_duration_;
  prometheus::Counter& reconcile_errors_;
  prometheus::Gauge& leader_;
  prometheus::Gauge& agents_connected_;
  prometheus::Gauge& workqueue_depth_;

  absl::Mutex mu_;
  std::map<std::string, JobPhase> job_phases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_
