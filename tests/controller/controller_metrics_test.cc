// ControllerMetrics' per-job series lifecycle, read from the text exposition it serves:
// live gauges while a job runs, none once it finished (so no alert can fire on it),
// nothing at all once it is forgotten (deleted), and peregrine_jobs{phase} counting each
// job once in its current phase.
#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/match.h"
#include "controller/controller_metrics.h"

namespace peregrine {
namespace {

JobStatus Running(uint64_t step) {
  JobStatus st;
  st.phase = JobPhase::kRunning;
  st.attempt = 1;
  st.last_completed_step = step;
  st.slots.resize(2);
  st.standby_desired = 1;
  st.standby_ready = 1;
  return st;
}

bool Has(const ControllerMetrics& m, const std::string& text) { return absl::StrContains(m.Serialize(), text); }

TEST_CASE("per-job series live while the job runs, shrink when it finishes, vanish when it is forgotten", "[unit]") {
  ControllerMetrics m;
  const JobStatus pending;
  JobStatus a = Running(7);
  m.ObserveJob("train", "a", pending, a);
  m.ObserveJob("train", "b", pending, Running(3));
  CHECK(Has(m, "peregrine_job_last_completed_step{job=\"a\",namespace=\"train\"} 7"));
  CHECK(Has(m, "peregrine_standby_ready{job=\"a\",namespace=\"train\"} 1"));
  CHECK(Has(m, "peregrine_evictions_total{job=\"a\",namespace=\"train\",reason=\"machine_fault\"} 0"));
  CHECK(Has(m, "peregrine_jobs{phase=\"Running\"} 2"));

  // Finished: the phase moves, the live gauges go; the counters stay until deletion.
  JobStatus done = a;
  done.phase = JobPhase::kSucceeded;
  m.ObserveJob("train", "a", a, done);
  CHECK(Has(m, "peregrine_jobs{phase=\"Running\"} 1"));
  CHECK(Has(m, "peregrine_jobs{phase=\"Succeeded\"} 1"));
  CHECK_FALSE(Has(m, "peregrine_job_last_completed_step{job=\"a\""));
  CHECK_FALSE(Has(m, "peregrine_standby_ready{job=\"a\""));
  CHECK_FALSE(Has(m, "peregrine_job_machines{job=\"a\""));
  CHECK(Has(m, "peregrine_evictions_total{job=\"a\",namespace=\"train\",reason=\"machine_fault\"} 0"));
  m.ObserveJob("train", "a", done, done);  // observing it again brings nothing back
  CHECK_FALSE(Has(m, "peregrine_job_last_completed_step{job=\"a\""));

  // Deleted: nothing labelled with it remains and it leaves the phase counts.
  m.ForgetJob("train", "a");
  CHECK_FALSE(Has(m, "job=\"a\""));
  CHECK(Has(m, "peregrine_jobs{phase=\"Succeeded\"} 0"));
  CHECK(Has(m, "peregrine_jobs{phase=\"Running\"} 1"));
  // The other job is untouched; forgetting an unknown job is a no-op.
  CHECK(Has(m, "peregrine_job_last_completed_step{job=\"b\",namespace=\"train\"} 3"));
  m.ForgetJob("train", "nope");
  CHECK(Has(m, "peregrine_jobs{phase=\"Running\"} 1"));
  // A job of the same name in another namespace is another job.
  m.ObserveJob("other", "b", pending, Running(1));
  m.ForgetJob("train", "b");
  CHECK(Has(m, "peregrine_job_last_completed_step{job=\"b\",namespace=\"other\"} 1"));
  CHECK_FALSE(Has(m, "namespace=\"train\""));
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("peregrine_agent_results_dropped_total follows the registry's growing total of dropped results", "[unit]") {
  ControllerMetrics m;
  CHECK(Has(m, "peregrine_agent_results_dropped_total 0\n"));
  m.ObserveAgentResultsDropped(3);
  CHECK(Has(m, "peregrine_agent_results_dropped_total 3\n"));
  m.ObserveAgentResultsDropped(3);  // the same total again (another job's round)
  m.ObserveAgentResultsDropped(1);  // an older report
  CHECK(Has(m, "peregrine_agent_results_dropped_total 3\n"));
  m.ObserveAgentResultsDropped(10);
  CHECK(Has(m, "peregrine_agent_results_dropped_total 10\n"));
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

Incident IncidentOf(uint64_t id, IncidentKind kind, double lost) {
  Incident inc;
  inc.id = id;
  inc.kind = kind;
  inc.training_time_lost_seconds = lost;
  return inc;
}

FailSlowFinding Finding(uint64_t id, MitigationStrategy strategy, double loss, int64_t ended_at = 0) {
  FailSlowFinding f;
  f.id = id;
  f.kind = FailSlowKind::kCompute;
  f.mitigation.strategy = strategy;
  f.mitigation.loss_seconds = loss;
  f.ended_at = ended_at;
  return f;
}

TEST_CASE("peregrine_time_lost_seconds_total grows by cause: incident kinds by id, fail_slow by the ladder's loss", "[unit]") {
  ControllerMetrics m;
  JobStatus a = Running(5);
  a.next_incident_id = 3;
  a.incidents = {IncidentOf(1, IncidentKind::kHang, 30), IncidentOf(2, IncidentKind::kMachineFault, 0)};
  m.ObserveJob("ml", "j", Running(5), a);  // both incidents new: the hang's 30 s count
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"Hang\",job=\"j\",namespace=\"ml\"} 30\n"));
  CHECK_FALSE(Has(m, "cause=\"MachineFault\""));

  JobStatus b = a;
  b.incidents[0].training_time_lost_seconds = 45;   // +15 on the hang
  b.incidents[1].training_time_lost_seconds = 100;  // +100 on the fault
  m.ObserveJob("ml", "j", a, b);
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"Hang\",job=\"j\",namespace=\"ml\"} 45\n"));
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"MachineFault\",job=\"j\",namespace=\"ml\"} 100\n"));
  m.ObserveJob("ml", "j", b, b);  // nothing grew: nothing added
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"MachineFault\",job=\"j\",namespace=\"ml\"} 100\n"));

  // The fail-slow ladder: 10 s on ignore, then 25; on redistribute the loss restarts (4):
  // the new strategy's whole value counts.
  JobStatus c = b;
  c.fail_slows = {Finding(7, MitigationStrategy::kIgnore, 10)};
  m.ObserveJob("ml", "j", b, c);
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"fail_slow\",job=\"j\",namespace=\"ml\"} 10\n"));
  JobStatus d = c;
  d.fail_slows[0].mitigation.loss_seconds = 25;
  m.ObserveJob("ml", "j", c, d);
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"fail_slow\",job=\"j\",namespace=\"ml\"} 25\n"));
  JobStatus e = d;
  e.fail_slows[0].mitigation.strategy = MitigationStrategy::kRedistribute;
  e.fail_slows[0].mitigation.loss_seconds = 4;
  m.ObserveJob("ml", "j", d, e);
  CHECK(Has(m, "peregrine_time_lost_seconds_total{cause=\"fail_slow\",job=\"j\",namespace=\"ml\"} 29\n"));
  // The job-wide total is unchanged by all this (it follows training_time_lost_seconds).
  CHECK_FALSE(Has(m, "peregrine_training_time_lost_seconds_total{"));
}

TEST_CASE("fail-slow mitigations count moves up the ladder and peregrine_failslow_open counts open findings by strategy", "[unit]") {
  ControllerMetrics m;
  JobStatus a = Running(5);
  m.ObserveJob("ml", "j", Running(5), a);
  // Every strategy has its series from the start (0), so rate() and the alert see them.
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"redistribute\"} 0\n"));
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"replace\"} 0\n"));
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"ignore\"} 0\n"));
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"remap\"} 0\n"));

  JobStatus b = a;
  b.fail_slows = {Finding(1, MitigationStrategy::kIgnore, 0), Finding(2, MitigationStrategy::kIgnore, 0),
                  Finding(3, MitigationStrategy::kIgnore, 0, /*ended_at=*/99)};
  m.ObserveJob("ml", "j", a, b);
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"ignore\"} 2\n"));

  JobStatus c = b;
  c.fail_slows[0].mitigation.strategy = MitigationStrategy::kRedistribute;
  m.ObserveJob("ml", "j", b, c);
  m.ObserveJob("ml", "j", c, c);  // staying on a strategy is no new mitigation
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"redistribute\"} 1\n"));
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"ignore\"} 1\n"));
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"redistribute\"} 1\n"));

  JobStatus d = c;
  d.fail_slows[0].mitigation.strategy = MitigationStrategy::kReplace;
  d.fail_slows[0].ended_at = 500;
  m.ObserveJob("ml", "j", c, d);
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"replace\"} 1\n"));
  CHECK(Has(m, "peregrine_failslow_open{job=\"j\",namespace=\"ml\",strategy=\"redistribute\"} 0\n"));
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"remap\"} 0\n"));

  // Finished: the open gauge goes with the other live gauges, the counters stay.
  JobStatus done = d;
  done.phase = JobPhase::kSucceeded;
  m.ObserveJob("ml", "j", d, done);
  CHECK_FALSE(Has(m, "peregrine_failslow_open{job=\"j\""));
  CHECK(Has(m, "peregrine_failslow_mitigations_total{job=\"j\",namespace=\"ml\",strategy=\"replace\"} 1\n"));
}

AgentObservation AgentOf(const std::string& pod, bool connected, std::vector<InspectionObservation> inspections = {}) {
  AgentObservation a;
  a.pod = pod;
  a.connected = connected;
  a.inspections = std::move(inspections);
  return a;
}

InspectionObservation Inspection(const std::string& kind, InspectionStatus status) {
  InspectionObservation i;
  i.kind = kind;
  i.component = kind + "0";
  i.status = status;
  return i;
}

TEST_CASE("ObserveAgents counts the held pods' agents by state and their inspection problems by kind and status", "[unit]") {
  ControllerMetrics m;
  JobStatus st = Running(5);
  st.slots[0].pod = "j-m0";
  st.slots[1].pod = "j-m1";
  st.standbys.resize(2);
  st.standbys[0].pod = "j-s0";
  st.standbys[1].pod = "j-s1";  // its agent never registered: neither state
  JobObservation obs;
  obs.agents = {AgentOf("j-m0", true, {Inspection("gpu", InspectionStatus::kFault), Inspection("xid", InspectionStatus::kFault)}),
                AgentOf("j-m1", false, {Inspection("gpu", InspectionStatus::kFault), Inspection("rdma", InspectionStatus::kWarning),
                                        Inspection("host", InspectionStatus::kOk)}),
                AgentOf("j-s0", true),
                AgentOf("j-old", false, {Inspection("gpu", InspectionStatus::kError)})};  // a pod the job no longer holds
  m.ObserveAgents("ml", "j", st, obs);
  CHECK(Has(m, "peregrine_job_agents{job=\"j\",namespace=\"ml\",state=\"connected\"} 2\n"));
  CHECK(Has(m, "peregrine_job_agents{job=\"j\",namespace=\"ml\",state=\"disconnected\"} 1\n"));
  CHECK(Has(m, "peregrine_machine_inspection_problems{job=\"j\",kind=\"gpu\",namespace=\"ml\",status=\"fault\"} 2\n"));
  CHECK(Has(m, "peregrine_machine_inspection_problems{job=\"j\",kind=\"xid\",namespace=\"ml\",status=\"fault\"} 1\n"));
  CHECK(Has(m, "peregrine_machine_inspection_problems{job=\"j\",kind=\"rdma\",namespace=\"ml\",status=\"warning\"} 1\n"));
  CHECK_FALSE(Has(m, "kind=\"host\""));       // OK is no problem
  CHECK_FALSE(Has(m, "status=\"cannot_see\""));
  CHECK_FALSE(Has(m, "status=\"error\""));    // not a held pod's

  // An inspection that cannot see from the pod is its own status, never a pass.
  obs.agents[0].inspections.push_back(Inspection("network", InspectionStatus::kCannotSee));
  m.ObserveAgents("ml", "j", st, obs);
  CHECK(Has(m, "peregrine_machine_inspection_problems{job=\"j\",kind=\"network\",namespace=\"ml\",status=\"cannot_see\"} 1\n"));
  obs.agents[0].inspections.pop_back();

  // The agent reconnects and its problems clear: the gone series go, the states stay.
  obs.agents[1] = AgentOf("j-m1", true);
  obs.agents[0].inspections.pop_back();
  m.ObserveAgents("ml", "j", st, obs);
  CHECK(Has(m, "peregrine_job_agents{job=\"j\",namespace=\"ml\",state=\"connected\"} 3\n"));
  CHECK(Has(m, "peregrine_job_agents{job=\"j\",namespace=\"ml\",state=\"disconnected\"} 0\n"));
  CHECK(Has(m, "peregrine_machine_inspection_problems{job=\"j\",kind=\"gpu\",namespace=\"ml\",status=\"fault\"} 1\n"));
  CHECK_FALSE(Has(m, "kind=\"xid\""));
  CHECK_FALSE(Has(m, "kind=\"rdma\""));

  // Finished: no agent or inspection series; forgotten: nothing.
  JobStatus done = st;
  done.phase = JobPhase::kFailed;
  m.ObserveAgents("ml", "j", done, obs);
  CHECK_FALSE(Has(m, "peregrine_job_agents{job=\"j\""));
  CHECK_FALSE(Has(m, "peregrine_machine_inspection_problems{job=\"j\""));
  m.ObserveAgents("ml", "k", st, obs);
  m.ForgetJob("ml", "k");
  CHECK_FALSE(Has(m, "job=\"k\""));
}

}  // namespace
}  // namespace peregrine
