// The metric names peregrine-controller really exports, for the deploy suite's checks of
// the alert rules and the dashboard (alert_rules_test.cc, dashboard_test.cc): a real
// ControllerMetrics is fed one job that touches every per-job series (incidents, evictions,
// a restart, a diagnosis stage, fail-slow findings with a validation and a mitigation, agents
// with inspection problems, node health counts, a reconcile) and the names are read from
// the sample lines of its text exposition (a histogram gives _bucket, _sum and _count).
// KubeMode registers two more families on the same registry (Kubernetes API request
// latency and errors, controller/kube/kube_mode.cc); those are read from that source's
// Build*().Name("...") calls, as the kube e2e suite checks them on a live scrape.
// Header-only; REQUIREs that the sources can be read.
#ifndef PEREGRINE_TESTS_DEPLOY_EXPORTED_METRICS_H_
#define PEREGRINE_TESTS_DEPLOY_EXPORTED_METRICS_H_

#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "controller/controller_metrics.h"
#include "controller/core/job_state.h"
#include "tests/deploy/deploy_tools.h"

namespace peregrine {

// The names in the sample lines of a text exposition.
inline std::set<std::string> SampleNames(const std::string& exposition) {
  std::set<std::string> names;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return names;
}

inline std::string FedControllerMetrics() {
  ControllerMetrics m;
  JobStatus before;
  before.phase = JobPhase::kRunning;
  before.attempt = 1;
  before.slots.resize(2);
  before.slots[0].pod = "j-m0";
  before.slots[1].pod = "j-m1";
  before.standbys.resize(1);
  before.standbys[0].pod = "j-s0";
  FailSlowFinding f;
  f.id = 1;
  f.kind = FailSlowKind::kCompute;
  JobStatus after = before;
  after.fail_slows = {f};  // new and localized: counted as detected
  after.attempt = 2;
  after.next_incident_id = 1;
  Incident inc;
  inc.id = 1;
  inc.kind = IncidentKind::kMachineFault;
  inc.training_time_lost_seconds = 60;
  DiagnosisStageRecord stage;
  stage.finished_at = 5;
  inc.diagnosis = {stage};
  after.incidents = {inc};
  after.training_time_lost_seconds = 60;
  Eviction e;
  e.pod = "j-m1";
  e.reason = "machine fault";
  e.at = 5;
  after.evicted = {e};
  after.fail_slows[0].validation.verdict = ValidationVerdict::kConfirmed;
  after.fail_slows[0].mitigation.strategy = MitigationStrategy::kRedistribute;
  after.fail_slows[0].mitigation.loss_seconds = 3;
  m.ObserveJob("ml", "j", before, after);
  JobObservation obs;
  for (const char* pod : {"j-m0", "j-m1", "j-s0"}) {
    AgentObservation a;
    a.pod = pod;
    a.connected = std::string(pod) != "j-m1";
    InspectionObservation i;
    i.kind = "gpu";
    i.status = InspectionStatus::kFault;
    a.inspections = {i};
    obs.agents.push_back(a);
  }
  m.ObserveAgents("ml", "j", after, obs);
  m.ObserveReconcile(0.01, true);
  m.SetLeader(true);
  m.SetAgentsConnected(2);
  m.SetWorkQueueDepth(0);
  m.ObserveAgentResultsDropped(1);
  m.SetNodeHealthCounts({10, 1, 1, 0, 1});
  return m.Serialize();
}

inline std::set<std::string> ExportedMetricNames() {
  std::set<std::string> names = SampleNames(FedControllerMetrics());
  const std::string kube = ReadText(SourceDir() / "controller/kube/kube_mode.cc");
  const std::regex built(R"re(Build(Histogram|Counter|Gauge)\(\)\s*\.Name\("(peregrine_[a-z_]+)"\))re");
  int families = 0;
  for (auto it = std::sregex_iterator(kube.begin(), kube.end(), built); it != std::sregex_iterator(); ++it) {
    ++families;
    const std::string name = (*it)[2];
    if ((*it)[1] == "Histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(name + suffix);
    } else {
      names.insert(name);
    }
  }
  REQUIRE(families >= 2);  // the API request histogram and error counter
  return names;
}

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_EXPORTED_METRICS_H_
