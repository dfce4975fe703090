// ValidateForKubernetes and spec.checkpoint.persistPath: persisted checkpoints must
// outlive the pods, so with persistEverySteps > 0 the path must be set and lie on a
// writable volume of the training container that is not emptyDir, configMap, secret,
// downwardAPI or projected. The template's own volumes and mounts reach the pod as the
// user wrote them (BuildPod keeps them), which is how a PVC or hostPath gets there.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "controller/kube/pod_builder.h"

namespace peregrine {
namespace {

using nlohmann::json;

TrainingJob JobWithPersist(const std::string& path, const json& mounts, const json& volumes) {
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "ml";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 4;
  job.spec.code.command = {"train"};
  job.spec.checkpoint.interval_steps = 10;
  job.spec.checkpoint.persist_every_steps = 100;
  job.spec.checkpoint.persist_path = path;
  json trainer = {{"name", "trainer"}, {"image", "example.com/train:1"}};
  if (!mounts.is_null()) trainer["volumeMounts"] = mounts;
  json spec = {{"containers", json::array({trainer})}};
  if (!volumes.is_null()) spec["volumes"] = volumes;
  job.spec.template_json = json{{"spec", spec}}.dump();
  return job;
}

TEST_CASE("ValidateForKubernetes: persistPath must be set and on a volume that outlives the pod", "[unit]") {
  const json pvc = json::array({json{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "ckpt"}}}}});
  const json host = json::array({json{{"name", "ckpt"}, {"hostPath", {{"path", "/var/ckpt"}}}}});
  const json empty_dir = json::array({json{{"name", "ckpt"}, {"emptyDir", json::object()}}});
  const json mount = json::array({json{{"name", "ckpt"}, {"mountPath", "/mnt/ckpt/"}}});
  struct Case {
    const char* name;
    TrainingJob job;
    const char* expected;  // "" when valid
  };
  TrainingJob off = JobWithPersist("", json(), json());
  off.spec.checkpoint.persist_every_steps = 0;
  TrainingJob read_only = JobWithPersist("/mnt/ckpt", json::array({json{{"name", "ckpt"}, {"mountPath", "/mnt/ckpt"},
                                                                        {"readOnly", true}}}),
                                         pvc);
  const std::vector<Case> cases = {
      {"persistence off needs no path", off, ""},
      {"a PVC mounted at the path", JobWithPersist("/mnt/ckpt", mount, pvc), ""},
      {"a hostPath mounted above the path", JobWithPersist("/mnt/ckpt/llm", mount, host), ""},
      {"no persistPath", JobWithPersist("", mount, pvc),
       "spec.checkpoint.persistPath: required when spec.checkpoint.persistEverySteps > 0 in Kubernetes"},
      {"no volume at the path", JobWithPersist("/ckpt", json(), json()),
       "spec.checkpoint.persistPath: '/ckpt' is not on a volume of the training container"},
      {"a sibling of the mount is not under it", JobWithPersist("/mnt/ckpt2", mount, pvc),
       "spec.checkpoint.persistPath: '/mnt/ckpt2' is not on a volume"},
      {"an emptyDir goes with the pod", JobWithPersist("/mnt/ckpt", mount, empty_dir),
       "spec.checkpoint.persistPath: '/mnt/ckpt' is on the emptyDir volume 'ckpt', which does not outlive the pod"},
      {"a read-only mount", read_only, "spec.checkpoint.persistPath: '/mnt/ckpt' is on the read-only volumeMount 'ckpt'"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const absl::Status s = ValidateForKubernetes(c.job);
    if (std::string(c.expected).empty()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.message()), Catch::Contains(c.expected));
    }
  }
}

TEST_CASE("BuildPod keeps the template's persist volume and its mount in the training container", "[unit]") {
  const json mount = json::array({json{{"name", "ckpt"}, {"mountPath", "/mnt/ckpt"}}});
  const json pvc = json::array({json{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "llm-ckpt"}}}}});
  const TrainingJob job = JobWithPersist("/mnt/ckpt", mount, pvc);
  PodBuildOptions options;
  options.controller_address = "controller:7400";
  options.agent_image = "agent";
  absl::StatusOr<json> pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, ""}, options);
  REQUIRE(pod.ok());
  bool mounted = false;
  for (const json& m : (*pod)["spec"]["containers"][0]["volumeMounts"]) {
    mounted |= m["name"] == "ckpt" && m["mountPath"] == "/mnt/ckpt";
  }
  CHECK(mounted);
  bool volume = false;
  for (const json& v : (*pod)["spec"]["volumes"]) {
    volume |= v["name"] == "ckpt" && v["persistentVolumeClaim"]["claimName"] == "llm-ckpt";
  }
  CHECK(volume);
}

}  // namespace
}  // namespace peregrine
