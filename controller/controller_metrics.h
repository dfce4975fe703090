// ControllerMetrics: the controller's Prometheus metrics (prometheus-cpp), named by the
// Prometheus conventions: peregrine_ prefix, base units, _total counters, labels job and
// namespace, no unbounded label values (incident kinds and eviction reasons are fixed sets).
// The chart's alert rules (helm/peregrine/files/alerts.yaml) use these names.
//
// Per-job series live as long as the job: the gauges (machines, standby, last step,
// ETTR, iteration time) only while it is Pending/Running/Recovering (a finished job has
// none, so no alert fires on it), the counters until ForgetJob (the job was deleted).
// peregrine_jobs{phase} counts each known job once, in its current phase.
//
// Time lost by cause: peregrine_time_lost_seconds_total{cause} grows by what an incident's
// training_time_lost_seconds grew (cause = the incident kind) and by what a fail-slow
// finding's mitigation loss grew (cause = "fail_slow"); the per-job total
// peregrine_training_time_lost_seconds_total is kept as it was. Fail-slow mitigations
// count the ladder's moves to redistribute/remap/replace; peregrine_failslow_open counts
// the open findings by their current strategy. The agent series (ObserveAgents) need the
// round's observation: the held pods' agents connected or not, and their machine
// inspection problems by kind and status.
//
// Thread-safe (prometheus-cpp metrics are atomic; the job bookkeeping takes a lock).
#ifndef PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_
#define PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "controller/core/job_state.h"
#include "controller/core/node_lifecycle.h"
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
  // The agents of the pods the job holds now (slots and standbys, from `status`) as `obs`
  // shows them: peregrine_job_agents{state} counts connected agents and agents that
  // registered but are not connected now (a pod whose agent never registered is neither);
  // peregrine_machine_inspection_problems{kind,status} counts their latest non-OK
  // inspection results. A finished job's series are removed.
  void ObserveAgents(const std::string& ns, const std::string& job, const JobStatus& status, const JobObservation& obs);
  // The job is gone: every series labelled with it is removed and it leaves the phase
  // counts. A job never observed is a no-op.
  void ForgetJob(const std::string& ns, const std::string& job);
  void ObserveReconcile(double seconds, bool error);
  void SetLeader(bool leader);
  void SetAgentsConnected(int n);
  void SetWorkQueueDepth(int n);
  // The agent registry's running total of dropped command results
  // (AgentRegistry::DroppedCommandResults): peregrine_agent_results_dropped_total grows by
  // what the total grew since the last call; a total not above the last one adds nothing.
  void ObserveAgentResultsDropped(uint64_t total);
  // peregrine_node_health_machines{state}: the machines in each node health state
  // (controller/core/node_lifecycle.h CountNodeHealth's order); every state has a series.
  void SetNodeHealthCounts(const std::array<int64_t, kNodeHealthStates>& counts);

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
  prometheus::Family<prometheus::Counter>& time_lost_by_cause_;
  prometheus::Family<prometheus::Gauge>& last_step_;
  prometheus::Family<prometheus::Gauge>& ettr_;
  prometheus::Family<prometheus::Gauge>& iteration_seconds_;
  prometheus::Family<prometheus::Counter>& failslows_;  // localized fail-slows by kind
  prometheus::Family<prometheus::Counter>& failslow_validations_;  // validations judged, by verdict
  prometheus::Family<prometheus::Counter>& diagnosis_stages_;  // stop-time diagnosis stages finished
  prometheus::Family<prometheus::Counter>& failslow_mitigations_;  // ladder moves, by strategy
  prometheus::Family<prometheus::Gauge>& failslow_open_;           // open findings, by strategy
  prometheus::Family<prometheus::Gauge>& job_agents_;              // held pods' agents, by state
  prometheus::Family<prometheus::Gauge>& inspection_problems_;     // non-OK inspections, by kind and status
  prometheus::Histogram& reconcile_duration_;
  prometheus::Counter& reconcile_errors_;
  prometheus::Gauge& leader_;
  prometheus::Gauge& agents_connected_;
  prometheus::Gauge& workqueue_depth_;
  prometheus::Counter& agent_results_dropped_;
  prometheus::Family<prometheus::Gauge>& node_health_;  // machines per node health state

  // The series `family.Add(labels)` of job `key`, remembered for removal.
  template <typename T>
  T& Series(const std::string& key, prometheus::Family<T>& family, const prometheus::Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the job's series of the families in `only` (all when empty).
  void RemoveSeries(const std::string& key, const std::vector<const void*>& only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdatePhaseCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct TrackedSeries {
    const void* family;
    std::function<void()> remove;
  };

  absl::Mutex mu_;
  std::map<std::string, JobPhase> job_phases_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_results_seen_ ABSL_GUARDED_BY(mu_) = 0;
  // job key -> its series by metric address.
  std::map<std::string, std::map<const void*, TrackedSeries>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CONTROLLER_METRICS_H_
