// Every example manifest is a job the product can run: for each *.yaml / *.yml under
// examples/ (subfolders included) and each TrainingJob document in it, the document
// validates against the CRD's schema (as the API server would) and parses with the
// controller's parser; a document for a cluster (one with a pod template or an image)
// also passes the Kubernetes checks and the controller's pod builder makes an active and
// a standby pod from it whose training container asks for exactly gpusPerMachine GPUs (a
// local-mode job, with neither, runs the command on this host). Also the pod builder's GPU rule
// (nvidia.com/gpu filled in from gpusPerMachine; a conflicting value is invalid).
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "controller/core/decision_engine.h"
#include "controller/job_parser.h"
#include "controller/kube/kube_cluster.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSourceDir = PEREGRINE_SOURCE_DIR;

// A pod template (spec.template as JSON) whose one container is `container`.
std::string PodTemplateWith(const json& container) {
  return json{{"spec", {{"containers", json::array({container})}}}}.dump();
}

// Job `name` in namespace ml, 4 GPUs a machine, running `train` in the pod template's
// one container `container`.
TrainingJob JobWithTrainer(const std::string& name, const json& container) {
  TrainingJob job;
  job.metadata.name = name;
  job.metadata.namespace_ = "ml";
  job.spec.gpus_per_machine = 4;
  job.spec.code.command = {"train"};
  job.spec.template_json = PodTemplateWith(container);
  return job;
}

KubeClusterOptions Options() {
  KubeClusterOptions o;
  o.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  o.agent_image = "ghcr.io/peregrine-dev/peregrine-agent:0.1.0";
  return o;
}

// The training container's nvidia.com/gpu limit as a number (-1 when absent or not one).
long long GpuLimit(const json& pod) {
  const json& limits = pod["spec"]["containers"][0]["resources"]["limits"];
  if (!limits.is_object() || !limits.contains(kGpuResource)) return -1;
  const json& q = limits[kGpuResource];
  if (q.is_number_integer()) return q.get<long long>();
  return q.is_string() ? std::stoll(q.get<std::string>()) : -1;
}

// The training container mounts /dev/shm from an emptyDir volume with medium Memory.
bool MountsMemoryShm(const json& pod) {
  std::string volume;
  for (const json& m : pod["spec"]["containers"][0].value("volumeMounts", json::array())) {
    if (m.value("mountPath", "") == "/dev/shm") volume = m.value("name", "");
  }
  for (const json& v : pod["spec"].value("volumes", json::array())) {
    if (!volume.empty() && v.value("name", "") == volume && v.contains("emptyDir")) {
      return v["emptyDir"].value("medium", "") == "Memory";
    }
  }
  return false;
}

TEST_CASE("every example TrainingJob validates against the CRD then parses then builds pods with its GPUs", "[unit]") {
  const YAML::Node schema = TrainingJobSchema();
  int jobs = 0;
  bool has_cluster_example = false;
  std::set<std::string> files;  // relative to examples/
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(kSourceDir / "examples")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".yaml" && ext != ".yml") continue;
    std::vector<YAML::Node> docs;
    REQUIRE_NOTHROW(docs = YAML::LoadAll(ReadText(e.path())));
    int index = 0;
    for (YAML::Node& doc : docs) {
      ++index;
      if (!doc.IsMap() || !doc["kind"] || doc["kind"].Scalar() != "TrainingJob") continue;
      const std::string file = fs::relative(e.path(), kSourceDir / "examples").string();
      INFO(file << " document " << index);
      ++jobs;
      files.insert(file);
      const std::string text = YAML::Dump(doc);  // before the validator applies defaults
      YAML::Node validated = YAML::Clone(doc);
      const std::vector<std::string> errors = ValidateAgainstSchema(schema, validated);
      INFO("schema errors:\n" << absl::StrJoin(errors, "\n"));
      CHECK(errors.empty());

      absl::StatusOr<TrainingJob> job = ParseTrainingJob(text);
      INFO("parser: " << job.status().ToString());
      REQUIRE(job.ok());
      if (job->metadata.namespace_.empty()) job->metadata.namespace_ = "default";
      job->metadata.uid = "uid-1";
      if (job->spec.template_json.empty() && job->spec.code.image.empty()) continue;  // local mode only

      CHECK(ValidateForKubernetes(*job).ok());
      PodToCreate active{ActivePodName(job->metadata.name, job->spec.machines - 1), PodRole::kActive,
                         job->spec.machines - 1, ""};
      PodToCreate standby{absl::StrCat(job->metadata.name, "-s0"), PodRole::kStandby, -1, ""};
      for (const PodToCreate& request : {active, standby}) {
        absl::StatusOr<json> pod = BuildPod(*job, request, Options());
        INFO(request.name << ": " << pod.status().ToString());
        REQUIRE(pod.ok());
        CHECK(GpuLimit(*pod) == job->spec.gpus_per_machine);
        CHECK((*pod)["metadata"]["name"] == request.name);
        // Checkpoints live in /dev/shm: a pod template of an example that takes them
        // mounts a memory-backed emptyDir there (the runtime's default /dev/shm is 64 MiB).
        if (job->spec.checkpoint.enabled() && !job->spec.template_json.empty()) CHECK(MountsMemoryShm(*pod));
      }
      if (!job->spec.template_json.empty()) has_cluster_example = true;
    }
  }
  CHECK(jobs >= 4);
  CHECK(has_cluster_example);  // at least one example carries a pod template for a real cluster
  // The PyTorch example's two jobs (local mode and a real cluster) are among them.
  CHECK(files.count("pytorch/local.yaml") == 1);
  CHECK(files.count("pytorch/kubernetes.yaml") == 1);
}

TEST_CASE("BuildPod gives the trainer gpusPerMachine GPUs and rejects a conflicting value", "[unit]") {
  struct Case {
    const char* name;
    json resources;     // the template container's resources (null: none)
    bool ok;
    json want_request;  // the request after building (null: none)
  };
  const std::vector<Case> cases = {
      {"no resources", nullptr, true, nullptr},
      {"cpu only", json{{"limits", {{"cpu", "8"}}}}, true, nullptr},
      {"same limit as string", json{{"limits", {{"nvidia.com/gpu", "4"}}}}, true, nullptr},
      {"same limit as number", json{{"limits", {{"nvidia.com/gpu", 4}}}}, true, nullptr},
      {"same request", json{{"requests", {{"nvidia.com/gpu", 4}}}}, true, "4"},
      {"conflicting limit", json{{"limits", {{"nvidia.com/gpu", 8}}}}, false, nullptr},
      {"conflicting request", json{{"requests", {{"nvidia.com/gpu", "2"}}}}, false, nullptr},
      {"not a count", json{{"limits", {{"nvidia.com/gpu", "500m"}}}}, false, nullptr},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    json container = {{"name", "trainer"}, {"image", "example.com/train:1"}};
    if (!c.resources.is_null()) container["resources"] = c.resources;
    const TrainingJob job = JobWithTrainer("gpu", container);
    absl::StatusOr<json> pod = BuildPod(job, PodToCreate{"gpu-m0", PodRole::kActive, 0, ""}, Options());
    CHECK(pod.ok() == c.ok);
    if (!pod.ok()) {
      CHECK(pod.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(pod.status().message()), Catch::Contains("nvidia.com/gpu") &&
                                                          Catch::Contains("gpusPerMachine = 4"));
      continue;
    }
    CHECK(GpuLimit(*pod) == 4);
    const json& requests = (*pod)["spec"]["containers"][0]["resources"]["requests"];
    if (c.want_request.is_null()) {
      CHECK((requests.is_null() || !requests.contains(kGpuResource)));
    } else {
      CHECK(requests[kGpuResource] == c.want_request);
    }
  }
}

TEST_CASE("ValidateForKubernetes rejects jobs the schema admits but no cluster can run", "[unit]") {
  struct Case {
    const char* name;
    std::function<void(TrainingJob&)> change;
    const char* expected;  // "" when valid
  };
  const json trainer = {{"name", "trainer"}, {"image", "example.com/train:1"}};
  const std::vector<Case> cases = {
      {"valid", [](TrainingJob&) {}, ""},
      {"no template, image from codeVersion", [](TrainingJob& j) { j.spec.template_json.clear(); }, ""},
      {"no template and no image",
       [](TrainingJob& j) {
         j.spec.template_json.clear();
         j.spec.code.image.clear();
       },
       "spec.template.spec.containers: the pod template needs a container"},
      {"template without containers and no image",
       [](TrainingJob& j) {
         j.spec.template_json = R"({"spec": {"nodeSelector": {"gpu": "h100"}}})";
         j.spec.code.image.clear();
       },
       "spec.template.spec.containers"},
      {"container without image and no codeVersion.image",
       [](TrainingJob& j) {
         j.spec.template_json = R"({"spec": {"containers": [{"name": "trainer"}]}})";
         j.spec.code.image.clear();
       },
       "spec.template.spec.containers[0].image: required"},
      {"conflicting GPU limit",
       [&](TrainingJob& j) {
         json c = trainer;
         c["resources"] = {{"limits", {{"nvidia.com/gpu", 8}}}};
         j.spec.template_json = PodTemplateWith(c);
       },
       "resources.limits.nvidia.com/gpu: 8 conflicts with spec.gpusPerMachine = 4"},
      {"template not an object", [](TrainingJob& j) { j.spec.template_json = "[1]"; }, "spec.template: not a JSON object"},
      {"name too long for the pod hostnames", [](TrainingJob& j) { j.metadata.name = std::string(49, 'a'); },
       "metadata.name: '" },
  };
  for (const Case& c : cases) {
    INFO(c.name);
    TrainingJob job = JobWithTrainer("llm", trainer);
    job.spec.machines = 2;
    job.spec.code.image = "example.com/train:2";
    c.change(job);
    const absl::Status s = ValidateForKubernetes(job);
    if (std::string(c.expected).empty()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.message()), Catch::Contains(c.expected));
    }
  }
}

}  // namespace
}  // namespace peregrine
