// The Kueue Workload built from a TrainingJob and the reading of its status
// (controller/kube/kueue_workload.h), on the objects as Kueue's v1beta1 API defines them.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "controller/job_parser.h"
#include "controller/kube/kueue_workload.h"

namespace peregrine {
namespace {

using nlohmann::json;

TrainingJob QueuedJob(const std::string& extra_template_spec = "") {
  auto job = ParseTrainingJob(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata:
  name: llm
  namespace: team
  uid: 0123456789abcdef
  labels: {kueue.x-k8s.io/queue-name: team-a}
spec:
  machines: 4
  gpusPerMachine: 8
  parallelism: {tensor: 8, pipeline: 1, data: 4}
  codeVersion: {image: "example.com/train:1", command: ["python", "train.py"]}
  standby: {min: 1, max: 1}
  template:
    spec:)" + extra_template_spec + R"(
      containers:
        - name: trainer
          image: example.com/train:1
          resources: {requests: {cpu: "16", memory: 64Gi}}
)");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  return *job;
}

PodBuildOptions Options() {
  PodBuildOptions o;
  o.controller_address = "peregrine:7400";
  o.agent_image = "example.com/peregrine-agent:1";
  return o;
}

json Condition(const std::string& type, const std::string& status, const std::string& reason,
               const std::string& message = "") {
  return json{{"type", type}, {"status", status}, {"reason", reason}, {"message", message},
              {"lastTransitionTime", "2026-01-01T00:00:00Z"}};
}

TEST_CASE("the Workload of a queued job: queue, owner, worker and standby pod sets with the pods' resources", "[unit]") {
  const TrainingJob job = QueuedJob();
  auto wl = BuildWorkload(job, Options(), std::nullopt);
  REQUIRE(wl.ok());
  CHECK((*wl)["apiVersion"] == "kueue.x-k8s.io/v1beta1");
  CHECK((*wl)["kind"] == "Workload");
  CHECK((*wl)["metadata"]["name"] == "trainingjob-llm-01234567");
  CHECK(WorkloadName(job) == "trainingjob-llm-01234567");
  CHECK((*wl)["metadata"]["namespace"] == "team");
  const json& owner = (*wl)["metadata"]["ownerReferences"][0];
  CHECK(owner["kind"] == "TrainingJob");
  CHECK(owner["uid"] == "0123456789abcdef");
  CHECK(owner["controller"] == true);
  CHECK((*wl)["metadata"]["labels"][kKueueJobUidLabel] == "0123456789abcdef");
  CHECK((*wl)["spec"]["queueName"] == "team-a");
  CHECK_FALSE((*wl)["spec"].contains("priorityClassName"));
  const json& sets = (*wl)["spec"]["podSets"];
  REQUIRE(sets.size() == 2);
  CHECK(sets[0]["name"] == "workers");
  CHECK(sets[0]["count"] == 4);
  CHECK(sets[1]["name"] == "standbys");
  CHECK(sets[1]["count"] == 1);
  for (const json& ps : sets) {
    // template.metadata carries labels (and annotations) only, as the API allows.
    for (const auto& [key, value] : ps["template"]["metadata"].items()) CHECK((key == "labels" || key == "annotations"));
    const json& c = ps["template"]["spec"]["containers"][0];
    CHECK(c["resources"]["limits"]["nvidia.com/gpu"] == "8");
    CHECK(c["resources"]["requests"]["cpu"] == "16");
  }
  CHECK(sets[0]["template"]["metadata"]["labels"]["peregrine.dev/job"] == "llm");
}

TEST_CASE("a job without standbys has one pod set and a job without the label has no Workload", "[unit]") {
  TrainingJob job = QueuedJob();
  job.spec.standby.min = 0;
  job.spec.standby.max = 0;
  auto sets = BuildPodSets(job, Options());
  REQUIRE(sets.ok());
  CHECK(sets->size() == 1);
  job.metadata.labels.clear();
  CHECK_FALSE(KueueQueueName(job).has_value());
  CHECK(BuildWorkload(job, Options(), std::nullopt).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the pod template's priority class goes to the Workload with its value", "[unit]") {
  const TrainingJob job = QueuedJob("\n      priorityClassName: research-high");
  CHECK(JobPriorityClassName(job) == "research-high");
  CHECK_FALSE(BuildWorkload(job, Options(), std::nullopt).ok());  // the API requires the value with the name
  auto wl = BuildWorkload(job, Options(), 1000);
  REQUIRE(wl.ok());
  CHECK((*wl)["spec"]["priorityClassName"] == "research-high");
  CHECK((*wl)["spec"]["priority"] == 1000);
  CHECK((*wl)["spec"]["priorityClassSource"] == "scheduling.k8s.io/priorityclass");
}

TEST_CASE("pod sets match only with the same names, counts and resources", "[unit]") {
  const TrainingJob job = QueuedJob();
  auto wl = BuildWorkload(job, Options(), std::nullopt);
  REQUIRE(wl.ok());
  CHECK(PodSetsMatch(*wl, *BuildPodSets(job, Options())));
  TrainingJob bigger = job;
  bigger.spec.machines = 8;
  bigger.spec.parallelism.data = 8;
  CHECK_FALSE(PodSetsMatch(*wl, *BuildPodSets(bigger, Options())));
  json changed = *BuildPodSets(job, Options());
  changed[0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "32";
  CHECK_FALSE(PodSetsMatch(*wl, changed));
  CHECK_FALSE(PodSetsMatch(json::object(), changed));
}

TEST_CASE("reading a Workload: waiting, admitted with flavors, evicted, finished", "[unit]") {
  json wl = {{"metadata", {{"name", "w"}}}, {"status", json::object()}};
  WorkloadView v = ReadWorkload(wl);
  CHECK(v.state == WorkloadState::kPending);
  auto hold = HoldFor("w", v);
  REQUIRE(hold.has_value());
  CHECK(hold->reason == "WorkloadNotAdmitted");

  wl["status"]["conditions"] = json::array(
      {Condition("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set workers: insufficient quota")});
  hold = HoldFor("w", ReadWorkload(wl));
  REQUIRE(hold.has_value());
  CHECK(absl::StrContains(hold->message, "insufficient quota"));

  // Quota reserved but admission checks pending: still not admitted.
  wl["status"]["admission"] = {{"clusterQueue", "cq"},
                               {"podSetAssignments",
                                json::array({json{{"name", "workers"}, {"flavors", {{"nvidia.com/gpu", "a100"}, {"cpu", "default"}}}},
                                             json{{"name", "standbys"}, {"flavors", {{"nvidia.com/gpu", "a100"}}}}})}};
  wl["status"]["conditions"] = json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                            Condition("Admitted", "False", "UnsatisfiedChecks", "waiting for checks")});
  v = ReadWorkload(wl);
  CHECK(v.state == WorkloadState::kPending);
  CHECK(absl::StrContains(HoldFor("w", v)->message, "waiting for checks"));

  wl["status"]["conditions"][1] = Condition("Admitted", "True", "Admitted");
  v = ReadWorkload(wl);
  CHECK(v.state == WorkloadState::kAdmitted);
  CHECK_FALSE(HoldFor("w", v).has_value());
  CHECK(v.flavors["workers"] == std::set<std::string>{"a100", "default"});
  CHECK(v.flavors["standbys"] == std::set<std::string>{"a100"});

  wl["status"]["conditions"].push_back(Condition("Evicted", "True", "Preempted", "to admit a higher priority one"));
  v = ReadWorkload(wl);
  CHECK(v.state == WorkloadState::kEvicted);
  hold = HoldFor("w", v);
  REQUIRE(hold.has_value());
  CHECK(hold->reason == "WorkloadEvicted");
  CHECK(absl::StrContains(hold->message, "Preempted"));

  // The quota goes back as Kueue's integrations release it; once only.
  REQUIRE(ReleaseQuota(&wl, "2026-01-02T00:00:00Z"));
  CHECK_FALSE(wl["status"].contains("admission"));
  v = ReadWorkload(wl);
  CHECK(v.state == WorkloadState::kEvicted);
  CHECK_FALSE(v.has_admission);
  bool reserved_false = false, requeued = false, admitted_false = false;
  for (const json& c : wl["status"]["conditions"]) {
    reserved_false |= c["type"] == "QuotaReserved" && c["status"] == "False" && c["reason"] == "Pending";
    admitted_false |= c["type"] == "Admitted" && c["status"] == "False";
    requeued |= c["type"] == "Requeued" && c["status"] == "True" && c["reason"] == "Preempted";
  }
  CHECK(reserved_false);
  CHECK(admitted_false);
  CHECK(requeued);
  CHECK_FALSE(ReleaseQuota(&wl, "2026-01-02T00:00:00Z"));

  REQUIRE(MarkFinished(&wl, true, "training finished", "2026-01-03T00:00:00Z"));
  CHECK(ReadWorkload(wl).state == WorkloadState::kFinished);
  CHECK_FALSE(MarkFinished(&wl, false, "again", "2026-01-03T00:00:00Z"));
}

TEST_CASE("flavors' node labels and tolerations go to the pods and conflicts are refused", "[unit]") {
  const json a100 = {{"metadata", {{"name", "a100"}}},
                     {"spec",
                      {{"nodeLabels", {{"gpu.example.com/model", "a100"}}},
                       {"tolerations", json::array({json{{"key", "gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})}}}};
  const json cpu = {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodeLabels", {{"cloud.example.com/spot", "true"}}}}}};
  auto s = SchedulingFromFlavors({a100, cpu});
  REQUIRE(s.ok());
  CHECK(s->node_selector.size() == 2);
  CHECK(s->tolerations.size() == 1);
  json pod = {{"spec", {{"nodeSelector", {{"team", "ml"}}}, {"tolerations", json::array({s->tolerations[0]})}}}};
  REQUIRE(ApplyScheduling(*s, &pod).ok());
  CHECK(pod["spec"]["nodeSelector"]["gpu.example.com/model"] == "a100");
  CHECK(pod["spec"]["nodeSelector"]["team"] == "ml");
  CHECK(pod["spec"]["tolerations"].size() == 1);  // not repeated

  json h100 = a100;
  h100["metadata"]["name"] = "h100";
  h100["spec"]["nodeLabels"]["gpu.example.com/model"] = "h100";
  auto conflict = SchedulingFromFlavors({a100, h100});
  REQUIRE_FALSE(conflict.ok());
  CHECK(absl::StrContains(conflict.status().message(), "gpu.example.com/model"));
  json pinned = {{"spec", {{"nodeSelector", {{"gpu.example.com/model", "v100"}}}}}};
  auto refused = ApplyScheduling(*s, &pinned);
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::StrContains(refused.message(), "nodeSelector[gpu.example.com/model]"));
}

}  // namespace
}  // namespace peregrine
