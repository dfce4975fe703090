// --host-inspections on the controller: with the node inspector DaemonSet covering the
// Nodes, every training pod's agent is started with --host-inspections node.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "controller/kube/kube_command.h"
#include "controller/kube/pod_builder.h"

namespace peregrine {
namespace {

TrainingJob Job() {
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "train";
  job.metadata.uid = "uid-1";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 8;
  job.spec.template_json = R"({"spec":{"containers":[{"name":"trainer","image":"trainer:1"}]}})";
  return job;
}

absl::StatusOr<KubeMainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--agent-image", "agent:1", "--agent-key-file", "/k"});
  return ParseKubeMainFlags(args, [](std::string_view) -> std::optional<std::string> { return std::nullopt; });
}

TEST_CASE("host inspections: the controller flag puts --host-inspections node on every agent it starts", "[unit]") {
  auto plain = Parse({});
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->mode.host_inspections_on_node);
  auto node = Parse({"--host-inspections", "node"});
  REQUIRE(node.ok());
  CHECK(node->mode.host_inspections_on_node);
  CHECK_FALSE(Parse({"--host-inspections", "pod"})->mode.host_inspections_on_node);
  auto bad = Parse({"--host-inspections", "daemonset"});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("--host-inspections"));

  PodBuildOptions options;
  options.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  options.agent_image = "agent:1";
  for (const PodRole role : {PodRole::kActive, PodRole::kStandby}) {
    const PodToCreate request{"llm-m0", role, role == PodRole::kActive ? 0 : -1, ""};
    auto in_pod = BuildPod(Job(), request, options);
    REQUIRE(in_pod.ok());
    CHECK((*in_pod)["spec"]["containers"][0]["command"].dump().find("--host-inspections") == std::string::npos);
    options.host_inspections_on_node = true;
    auto on_node = BuildPod(Job(), request, options);
    options.host_inspections_on_node = false;
    REQUIRE(on_node.ok());
    const std::vector<std::string> command = (*on_node)["spec"]["containers"][0]["command"].get<std::vector<std::string>>();
    auto flag = std::find(command.begin(), command.end(), "--host-inspections");
    REQUIRE(flag != command.end());
    REQUIRE(flag + 1 != command.end());
    CHECK(*(flag + 1) == "node");
  }
}

}  // namespace
}  // namespace peregrine
