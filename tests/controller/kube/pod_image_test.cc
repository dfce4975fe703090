// The image of a pod the controller creates: BuildPod takes it from the request (the
// running code version's, decided by the core), not from the desired spec, and
// ObservePodObject reads it back so the core can tell which pods run another image.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "controller/kube/pod_builder.h"
#include "controller/kube/pod_observer.h"

namespace peregrine {
namespace {

using nlohmann::json;

TrainingJob Job() {
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "train";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 8;
  job.spec.code.image = "example.com/train:2";  // the desired version (an update not applied yet)
  job.spec.template_json = R"({"spec":{"containers":[{"name":"trainer","image":"example.com/train:template"}]}})";
  return job;
}

PodBuildOptions Options() {
  PodBuildOptions options;
  options.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  options.agent_image = "example.com/peregrine-agent:1";
  return options;
}

TEST_CASE("BuildPod gives the training container the request's image, not the desired spec's", "[unit]") {
  for (const PodRole role : {PodRole::kActive, PodRole::kStandby}) {
    const PodToCreate request{"llm-m1-7", role, role == PodRole::kActive ? 1 : -1, "example.com/train:1"};
    auto pod = BuildPod(Job(), request, Options());
    REQUIRE(pod.ok());
    const json& containers = (*pod)["spec"]["containers"];
    CHECK(containers[0]["image"] == "example.com/train:1");
    // The init containers keep the agent image.
    for (const json& init : (*pod)["spec"]["initContainers"]) CHECK(init["image"] == "example.com/peregrine-agent:1");
    // What the cluster shows for that pod is the same image.
    CHECK(ObservePodObject(*pod, nullptr).image == "example.com/train:1");
  }
}

TEST_CASE("BuildPod without a request image takes the template's, then spec.codeVersion.image", "[unit]") {
  // A running version without an image runs the template's, whatever the desired spec says.
  TrainingJob job = Job();
  auto pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, ""}, Options());
  REQUIRE(pod.ok());
  CHECK((*pod)["spec"]["containers"][0]["image"] == "example.com/train:template");
  // A template container without an image takes spec.codeVersion.image.
  job.spec.template_json = R"({"spec":{"containers":[{"name":"trainer"}]}})";
  pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, ""}, Options());
  REQUIRE(pod.ok());
  CHECK((*pod)["spec"]["containers"][0]["image"] == "example.com/train:2");
  // No image anywhere: refused, naming the field.
  job.spec.code.image.clear();
  pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, ""}, Options());
  REQUIRE_FALSE(pod.ok());
  CHECK(std::string(pod.status().message()).find("spec.template.spec.containers[0].image") != std::string::npos);
  // A template without containers takes the request's image.
  job.spec.template_json.clear();
  pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, "example.com/train:1"}, Options());
  REQUIRE(pod.ok());
  CHECK((*pod)["spec"]["containers"][0]["image"] == "example.com/train:1");
}

TEST_CASE("ObservePodObject reads the first container's image and leaves it empty when there is none", "[unit]") {
  json pod = {{"metadata", {{"name", "llm-m0"}}},
              {"spec", {{"nodeName", "node-1"},
                        {"containers", json::array({json{{"name", "trainer"}, {"image", "example.com/train:1"}},
                                                    json{{"name", "sidecar"}, {"image", "example.com/side:9"}}})}}},
              {"status", {{"phase", "Running"}}}};
  CHECK(ObservePodObject(pod, nullptr).image == "example.com/train:1");
  pod["spec"]["containers"] = json::array();
  CHECK(ObservePodObject(pod, nullptr).image.empty());
  pod["spec"]["containers"] = "not a list";
  CHECK(ObservePodObject(pod, nullptr).image.empty());
  pod["spec"].erase("containers");
  CHECK(ObservePodObject(pod, nullptr).image.empty());
}

}  // namespace
}  // namespace peregrine
