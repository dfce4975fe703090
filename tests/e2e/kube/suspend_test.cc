// spec.suspend end to end against the fake API server (kube_env.h): setting it deletes
// every pod of the job (actives and the standby) and reports phase and condition
// Suspended; clearing it recreates the pods and the next attempt resumes.
#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/str_join.h"

#include "controller/core/conditions.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "controller/kube/resources.h"
#include "tests/e2e/kube/kube_env.h"

namespace peregrine::e2e {
namespace {

// The job's pods as the API server has them (pods being deleted included).
int JobPods(Env& env, const std::string& job) {
  kube::ListOptions opts;
  opts.label_selector = absl::StrCat(kJobLabel, "=", job);
  auto list = env.client->List(PodsPath(kNs), opts);
  return list.ok() ? static_cast<int>((*list)["items"].size()) : -1;
}

TEST_CASE("spec.suspend deletes a running job's pods and clearing it resumes the job", "[integration]") {
  Env env;
  RunJob(env, "pause", 2, 5);
  REQUIRE(JobPods(env, "pause") == 3);

  REQUIRE(env.client->MergePatch(TrainingJobsPath(kNs), "pause", json{{"spec", {{"suspend", true}}}}).ok());
  REQUIRE(env.WaitStatus("pause", [](const JobStatus& st) { return st.phase == JobPhase::kSuspended; }));
  CHECK(Eventually([&] { return JobPods(env, "pause") == 0; }));
  const JobStatus suspended = *env.Status("pause");
  const Condition* c = FindCondition(suspended, "Suspended");
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kTrue);
  CHECK(c->reason == "SuspendedBySpec");
  CHECK_THAT(c->message, Catch::Contains("in-memory checkpoints are off"));
  CHECK(suspended.standbys.empty());
  const uint64_t resume = suspended.resume_step;
  CHECK(resume >= 5);

  REQUIRE(env.client->MergePatch(TrainingJobsPath(kNs), "pause", json{{"spec", {{"suspend", false}}}}).ok());
  JobStatus last;
  const bool resumed = env.WaitStatus("pause", [&](const JobStatus& st) {
    last = st;
    return st.phase == JobPhase::kRunning && st.attempt == 2 && st.last_completed_step >= resume + 3 &&
           st.standby_ready == 1;
  });
  INFO("the last status seen: " << JobStatusToJson(last, 2));
  std::string pods;
  kube::ListOptions opts;
  opts.label_selector = absl::StrCat(kJobLabel, "=pause");
  if (auto list = env.client->List(PodsPath(kNs), opts); list.ok()) {
    for (const json& p : (*list)["items"]) {
      absl::StrAppend(&pods, p["metadata"].value("name", ""), " uid ", p["metadata"].value("uid", ""), " node ",
                      p["spec"].value("nodeName", ""), " phase ", p["status"].value("phase", ""),
                      p["metadata"].contains("deletionTimestamp") ? " deleting" : "", "\n");
    }
  }
  INFO("pods:\n" << pods << "kubelet runs " << absl::StrJoin(env.kubelet->RunningPods(), ", ") << "; "
                  << env.kubelet->ConnectedAgents() << " agents connected");
  REQUIRE(resumed);
  CHECK(JobPods(env, "pause") == 3);
  const Condition* after = FindCondition(*env.Status("pause"), "Suspended");
  REQUIRE(after != nullptr);
  CHECK(after->status == ConditionStatus::kFalse);
}

}  // namespace
}  // namespace peregrine::e2e
