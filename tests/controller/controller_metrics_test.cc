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
