#include "controller/controller_metrics.h"

#include <algorithm>
#include <cctype>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/text_serializer.h"

namespace peregrine {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

constexpr JobPhase kPhases[] = {JobPhase::kPending, JobPhase::kRunning, JobPhase::kRecovering, JobPhase::kSucceeded,
                                JobPhase::kFailed, JobPhase::kSuspended};

constexpr MitigationStrategy kStrategies[] = {MitigationStrategy::kIgnore, MitigationStrategy::kRedistribute,
                                             MitigationStrategy::kRemap, MitigationStrategy::kReplace};

// InspectionStatus as a label value: "warning", "fault", "error", "not_present", "unknown".
std::string StatusLabel(InspectionStatus s) {
  std::string out = ToString(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const FailSlowFinding* FindingById(const std::vector<FailSlowFinding>& findings, uint64_t id) {
  for (const FailSlowFinding& f : findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

// Eviction reasons become a fixed label set.
std::string EvictionReasonLabel(const Eviction& e) {
  return e.reason.rfind("standby failed", 0) == 0 ? "standby_failed" : "machine_fault";
}

}  // namespace

ControllerMetrics::ControllerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(BuildGauge().Name("peregrine_jobs").Help("TrainingJobs by phase.").Register(*registry_)),
      machines_(BuildGauge().Name("peregrine_job_machines").Help("A job's machines by state (active, standby).").Register(*registry_)),
      standby_desired_(BuildGauge().Name("peregrine_standby_desired").Help("Warm standbys the binomial quantile asks for.").Register(*registry_)),
      standby_ready_(BuildGauge().Name("peregrine_standby_ready").Help("Warm standbys registered and self-checked.").Register(*registry_)),
      incidents_(BuildCounter().Name("peregrine_incidents_total").Help("Incidents detected, by kind.").Register(*registry_)),
      evictions_(BuildCounter().Name("peregrine_evictions_total").Help("Machines evicted, by reason.").Register(*registry_)),
      restarts_(BuildCounter().Name("peregrine_restarts_total").Help("Job-wide restarts, by kind (in_place, standby_activation).").Register(*registry_)),
      time_lost_(BuildCounter().Name("peregrine_training_time_lost_seconds_total").Help("Training time lost to incidents.").Register(*registry_)),
      time_lost_by_cause_(BuildCounter().Name("peregrine_time_lost_seconds_total").Help("Training time lost, by cause (the incident kind, or fail_slow for the fail-slow ladder's accumulated loss).").Register(*registry_)),
      last_step_(BuildGauge().Name("peregrine_job_last_completed_step").Help("The last step every rank completed.").Register(*registry_)),
      ettr_(BuildGauge().Name("peregrine_job_ettr_ratio").Help("Effective training time ratio (productive / elapsed).").Register(*registry_)),
      iteration_seconds_(BuildGauge().Name("peregrine_job_iteration_seconds").Help("Mean iteration time over the last heartbeats.").Register(*registry_)),
      failslows_(BuildCounter().Name("peregrine_failslow_detected_total").Help("Fail-slows localized, by kind (compute, communication, compute+communication; unlocalized when one ended before it was).").Register(*registry_)),
      failslow_validations_(BuildCounter().Name("peregrine_failslow_validations_total").Help("Fail-slow validations while paused (GEMM + link rounds), by verdict (confirmed, not confirmed, failed).").Register(*registry_)),
      diagnosis_stages_(BuildCounter().Name("peregrine_diagnosis_stages_total").Help("Stop-time diagnosis stages finished, by stage and verdict (passed, failed, no-verdict).").Register(*registry_)),
      failslow_mitigations_(BuildCounter().Name("peregrine_failslow_mitigations_total").Help("Fail-slow mitigations: a finding's ladder moved to a strategy (redistribute, remap, replace).").Register(*registry_)),
      failslow_open_(BuildGauge().Name("peregrine_failslow_open").Help("Open fail-slow findings, by their current mitigation strategy.").Register(*registry_)),
      job_agents_(BuildGauge().Name("peregrine_job_agents").Help("Agents of the pods a job holds, by state (connected, disconnected: registered but not connected now).").Register(*registry_)),
      inspection_problems_(BuildGauge().Name("peregrine_machine_inspection_problems").Help("Latest non-OK machine inspection results of a job's agents, by inspection kind and status.").Register(*registry_)),
      reconcile_duration_(BuildHistogram()
                              .Name("peregrine_reconcile_duration_seconds")
                              .Help("Time of one reconcile round.")
                              .Register(*registry_)
                              .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5})),
      reconcile_errors_(BuildCounter().Name("peregrine_reconcile_errors_total").Help("Reconcile rounds that hit an error.").Register(*registry_).Add({})),
      leader_(BuildGauge().Name("peregrine_controller_is_leader").Help("1 while this replica holds the leader lease.").Register(*registry_).Add({})),
      agents_connected_(BuildGauge().Name("peregrine_agents_connected").Help("Agent streams open.").Register(*registry_).Add({})),
      workqueue_depth_(BuildGauge().Name("peregrine_workqueue_depth").Help("Job keys ready to be reconciled (delayed resyncs not counted).").Register(*registry_).Add({})),
      agent_results_dropped_(BuildCounter().Name("peregrine_agent_results_dropped_total").Help("Command results agents sent for commands not pending for them, dropped unstored.").Register(*registry_).Add({})),
      node_health_(BuildGauge().Name(kNodeHealthMachinesMetric).Help(kNodeHealthMachinesHelp).Register(*registry_)) {
  for (JobPhase p : kPhases) jobs_.Add({{"phase", JobPhaseName(p)}}).Set(0);
  SetNodeHealthCounts({});
}

void ControllerMetrics::SetNodeHealthCounts(const std::array<int64_t, kNodeHealthStates>& counts) {
  for (size_t i = 0; i < kNodeHealthStates; ++i) {
    const std::string state(NodeHealthName(static_cast<NodeHealth>(i)));
    node_health_.Add({{kNodeHealthStateLabelName, state}}).Set(static_cast<double>(counts[i]));
  }
}

std::string ControllerMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

template <typename T>
T& ControllerMetrics::Series(const std::string& key, prometheus::Family<T>& family, const prometheus::Labels& labels) {
  T& metric = family.Add(labels);
  series_[key].emplace(&metric, TrackedSeries{&family, [&family, &metric] { family.Remove(&metric); }});
  return metric;
}

void ControllerMetrics::RemoveSeries(const std::string& key, const std::vector<const void*>& only) {
  auto it = series_.find(key);
  if (it == series_.end()) return;
  for (auto s = it->second.begin(); s != it->second.end();) {
    if (only.empty() || std::find(only.begin(), only.end(), s->second.family) != only.end()) {
      s->second.remove();
      s = it->second.erase(s);
    } else {
      ++s;
    }
  }
  if (it->second.empty()) series_.erase(it);
}

void ControllerMetrics::UpdatePhaseCounts() {
  for (JobPhase p : kPhases) {
    int n = 0;
    for (const auto& [k, phase] : job_phases_) n += phase == p ? 1 : 0;
    jobs_.Add({{"phase", JobPhaseName(p)}}).Set(n);
  }
}

void ControllerMetrics::ObserveJob(const std::string& ns, const std::string& job, const JobStatus& before,
                                   const JobStatus& after) {
  const std::string key = absl::StrCat(ns, "/", job);
  const std::map<std::string, std::string> labels = {{"job", job}, {"namespace", ns}};
  auto with = [&](const char* label, const std::string& value) {
    auto l = labels;
    l[label] = value;
    return l;
  };
  absl::MutexLock lock(&mu_);
  const bool finished = after.phase == JobPhase::kSucceeded || after.phase == JobPhase::kFailed;
  if (finished) {
    // No live gauges for a finished job: nothing about it can look stuck.
    RemoveSeries(key, {&machines_, &standby_desired_, &standby_ready_, &last_step_, &ettr_, &iteration_seconds_,
                       &failslow_open_});
  } else {
    std::map<MitigationStrategy, int> open;
    for (const FailSlowFinding& f : after.fail_slows) {
      if (f.ended_at == 0) ++open[f.mitigation.strategy];
    }
    for (MitigationStrategy s : kStrategies) Series(key, failslow_open_, with("strategy", ToString(s))).Set(open[s]);
    Series(key, machines_, with("state", "active")).Set(static_cast<double>(after.slots.size()));
    Series(key, machines_, with("state", "standby")).Set(static_cast<double>(after.standbys.size()));
    Series(key, standby_desired_, labels).Set(after.standby_desired);
    Series(key, standby_ready_, labels).Set(after.standby_ready);
    Series(key, last_step_, labels).Set(static_cast<double>(after.last_completed_step));
    Series(key, ettr_, labels).Set(after.ettr);
    Series(key, iteration_seconds_, labels).Set(after.mean_iteration_seconds);
  }
  // Labelled counters start at 0 so the alerts' series exist before the first eviction.
  for (const char* reason : {"machine_fault", "standby_failed"}) Series(key, evictions_, with("reason", reason));
  for (MitigationStrategy s : kStrategies) {
    if (s != MitigationStrategy::kIgnore) Series(key, failslow_mitigations_, with("strategy", ToString(s)));
  }
  // Counters from what changed.
  for (const Incident& inc : after.incidents) {
    if (inc.id >= before.next_incident_id) Series(key, incidents_, with("kind", ToString(inc.kind))).Increment();
    // Diagnosis stages that finished in this round (records only ever gain a finished_at).
    const Incident* old = nullptr;
    for (const Incident& b : before.incidents) {
      if (b.id == inc.id) old = &b;
    }
    for (size_t i = 0; i < inc.diagnosis.size(); ++i) {
      const DiagnosisStageRecord& r = inc.diagnosis[i];
      const bool was_finished = old != nullptr && i < old->diagnosis.size() && old->diagnosis[i].finished_at != 0;
      if (r.finished_at != 0 && !was_finished) {
        auto l = with("stage", ToString(r.stage));
        l["verdict"] = ToString(r.verdict);
        Series(key, diagnosis_stages_, l).Increment();
      }
    }
  }
  for (size_t i = 0; i < after.evicted.size(); ++i) {
    const Eviction& e = after.evicted[i];
    const bool is_new = std::none_of(before.evicted.begin(), before.evicted.end(), [&](const Eviction& b) {
      return b.pod == e.pod && b.at == e.at;
    });
    if (is_new) Series(key, evictions_, with("reason", EvictionReasonLabel(e))).Increment();
  }
  if (after.attempt > before.attempt && before.attempt > 0) {
    const bool activation = after.evicted.size() != before.evicted.size();
    Series(key, restarts_, with("kind", activation ? "standby_activation" : "in_place")).Increment();
  }
  for (const FailSlowFinding& f : after.fail_slows) {
    const bool counted_now = f.kind != FailSlowKind::kUnlocalized || f.ended_at != 0;
    if (!counted_now) continue;
    const bool counted_before = std::any_of(before.fail_slows.begin(), before.fail_slows.end(), [&](const FailSlowFinding& b) {
      return b.id == f.id && (b.kind != FailSlowKind::kUnlocalized || b.ended_at != 0);
    });
    if (!counted_before) Series(key, failslows_, with("kind", f.kind == FailSlowKind::kUnlocalized ? "unlocalized" : ToString(f.kind))).Increment();
  }
  for (const FailSlowFinding& f : after.fail_slows) {
    if (f.validation.verdict == ValidationVerdict::kNone) continue;
    const bool judged_before = std::any_of(before.fail_slows.begin(), before.fail_slows.end(), [&](const FailSlowFinding& b) {
      return b.id == f.id && b.validation.verdict != ValidationVerdict::kNone;
    });
    if (!judged_before) Series(key, failslow_validations_, with("verdict", ToString(f.validation.verdict))).Increment();
  }
  // Time lost by cause: each incident's growth (matched by id; a new one counts whole),
  // and each fail-slow finding's mitigation loss growth. The ladder's loss restarts from 0
  // when the strategy changes: then the new strategy's whole value is new loss.
  for (const Incident& inc : after.incidents) {
    double was = 0;
    for (const Incident& b : before.incidents) {
      if (b.id == inc.id) was = b.training_time_lost_seconds;
    }
    if (inc.training_time_lost_seconds > was) {
      Series(key, time_lost_by_cause_, with("cause", ToString(inc.kind))).Increment(inc.training_time_lost_seconds - was);
    }
  }
  for (const FailSlowFinding& f : after.fail_slows) {
    const FailSlowFinding* b = FindingById(before.fail_slows, f.id);
    const bool same_strategy = b != nullptr && b->mitigation.strategy == f.mitigation.strategy;
    const double was = same_strategy ? b->mitigation.loss_seconds : 0;
    if (f.mitigation.loss_seconds > was) {
      Series(key, time_lost_by_cause_, with("cause", "fail_slow")).Increment(f.mitigation.loss_seconds - was);
    }
    if (f.mitigation.strategy != MitigationStrategy::kIgnore && !same_strategy) {
      Series(key, failslow_mitigations_, with("strategy", ToString(f.mitigation.strategy))).Increment();
    }
  }
  if (after.training_time_lost_seconds > before.training_time_lost_seconds) {
    Series(key, time_lost_, labels).Increment(after.training_time_lost_seconds - before.training_time_lost_seconds);
  }
  job_phases_[key] = after.phase;
  UpdatePhaseCounts();
}

void ControllerMetrics::ObserveAgents(const std::string& ns, const std::string& job, const JobStatus& status,
                                      const JobObservation& obs) {
  const std::string key = absl::StrCat(ns, "/", job);
  absl::MutexLock lock(&mu_);
  // The problem series are recounted each round: a kind/status no longer reported goes.
  RemoveSeries(key, {&inspection_problems_});
  if (status.phase == JobPhase::kSucceeded || status.phase == JobPhase::kFailed) {
    RemoveSeries(key, {&job_agents_});
    return;
  }
  std::vector<std::string> held;
  for (const SlotStatus& s : status.slots) held.push_back(s.pod);
  for (const StandbyStatus& s : status.standbys) held.push_back(s.pod);
  int connected = 0;
  int disconnected = 0;
  std::map<std::pair<std::string, std::string>, int> problems;  // (kind, status) -> count
  // The agents by pod (the last of a pod wins), so a round is O(N), not O(N^2).
  absl::flat_hash_map<absl::string_view, const AgentObservation*> by_pod;
  by_pod.reserve(obs.agents.size());
  for (const AgentObservation& a : obs.agents) by_pod.insert_or_assign(absl::string_view(a.pod), &a);
  for (const std::string& pod : held) {
    if (pod.empty()) continue;
    auto found = by_pod.find(absl::string_view(pod));
    if (found == by_pod.end()) continue;  // never registered: the pod is still starting
    const AgentObservation* agent = found->second;
    ++(agent->connected ? connected : disconnected);
    for (const InspectionObservation& i : agent->inspections) {
      if (i.status != InspectionStatus::kOk) ++problems[{i.kind, StatusLabel(i.status)}];
    }
  }
  const prometheus::Labels labels = {{"job", job}, {"namespace", ns}};
  auto with = [&](const prometheus::Labels& extra) {
    auto l = labels;
    l.insert(extra.begin(), extra.end());
    return l;
  };
  Series(key, job_agents_, with({{"state", "connected"}})).Set(connected);
  Series(key, job_agents_, with({{"state", "disconnected"}})).Set(disconnected);
  for (const auto& [kind_status, n] : problems) {
    Series(key, inspection_problems_, with({{"kind", kind_status.first}, {"status", kind_status.second}})).Set(n);
  }
}

void ControllerMetrics::ForgetJob(const std::string& ns, const std::string& job) {
  const std::string key = absl::StrCat(ns, "/", job);
  absl::MutexLock lock(&mu_);
  RemoveSeries(key, {});
  if (job_phases_.erase(key) > 0) UpdatePhaseCounts();
}

void ControllerMetrics::ObserveReconcile(double seconds, bool error) {
  reconcile_duration_.Observe(seconds);
  if (error) reconcile_errors_.Increment();
}

void ControllerMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }
void ControllerMetrics::SetAgentsConnected(int n) { agents_connected_.Set(n); }
void ControllerMetrics::SetWorkQueueDepth(int n) { workqueue_depth_.Set(n); }

// Every job controller reports the one registry's total after its rounds; only growth counts,
// so the counter stays monotonic whatever order the reports arrive in.
void ControllerMetrics::ObserveAgentResultsDropped(uint64_t total) {
  absl::MutexLock lock(&mu_);
  if (total <= dropped_results_seen_) return;
  agent_results_dropped_.Increment(static_cast<double>(total - dropped_results_seen_));
  dropped_results_seen_ = total;
}

}  // namespace peregrine
