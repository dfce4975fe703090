#include "controller/kube/pod_builder.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/job_parser.h"
#include "controller/kube/resources.h"
#include "controller/kube/json_fields.h"

// The pod BuildPod makes from the TrainingJob's spec.template (a PodTemplateSpec):
//   - an init container (PodBuildOptions::agent_image) copies the agent's files into an
//     emptyDir mounted at /peregrine: it runs `cp -a /opt/peregrine/. /peregrine/`, the
//     agent image (docker/Dockerfile, target agent) holding bin/peregrine-agent,
//     bin/peregrine-diagnose and its tools, and lib/libperegrine_nccl.so under
//     kAgentImagePrefix;
//   - a second init container, peregrine-agent-credential (same image), the only
//     container that mounts the pod's projected service-account token for the audience
//     peregrine.dev (a serviceAccountToken volume), copies it with mode 0400 to
//     /var/run/peregrine/credential/bootstrap on an emptyDir of medium Memory shared with
//     the training container. It runs as the training container's user (its
//     runAsUser/runAsGroup/runAsNonRoot are copied), so the copy is the agent's, which
//     reads and removes it before it starts anything (docs/security.md);
//   - the training container (the template's first container) runs
//       /peregrine/bin/peregrine-agent --controller <addr> --job <ns>/<name> --pod <pod>
//                                      --role active|standby --machine-id $(NODE_NAME)
//     with NODE_NAME from the downward API, PEREGRINE_CREDENTIAL_FILE pointing at that
//     bootstrap file and, when spec.failSlow.enabled,
//     PEREGRINE_NCCL_HOOK=/peregrine/lib/libperegrine_nccl.so; with agent TLS
//     (PodBuildOptions::agent_tls) also --tls-ca /var/run/peregrine/ca/ca.crt, the job's
//     CA ConfigMap mounted as a directory (not subPath, so the kubelet's updates of a
//     rotated CA reach the file the agent re-reads before each connection attempt);
//   - labels peregrine.dev/job, /role, /slot (actives only); an ownerReference to the
//     TrainingJob (controller, blockOwnerDeletion) so deleting the job garbage-collects
//     it; hostname = pod name and subdomain = the job's headless Service, so rank 0 is
//     reachable at <pod>.<job>.<ns>.svc; restartPolicy Never (the controller, not the
//     kubelet, replaces a failed machine).

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

constexpr char kAgentBinDir[] = "/peregrine";
constexpr char kAgentBinary[] = "/peregrine/bin/peregrine-agent";
constexpr char kNcclHook[] = "/peregrine/lib/libperegrine_nccl.so";
// The diagnostics helper the agent runs (stop-time diagnosis, fail-slow validation); its
// tools (peregrine-nccl-check, peregrine-gemm, ...) are its neighbours in /peregrine/bin.
constexpr char kDiagnoseBinary[] = "/peregrine/bin/peregrine-diagnose";
constexpr char kBinVolume[] = "peregrine-bin";
// The projected service-account token (init container only) and the memory-backed
// directory it is copied into for the agent.
constexpr char kServiceAccountTokenDir[] = "/var/run/peregrine/serviceaccount";
constexpr char kServiceAccountTokenVolume[] = "peregrine-agent-token";
constexpr char kCredentialDir[] = "/var/run/peregrine/credential";
constexpr char kCredentialVolume[] = "peregrine-credential";
constexpr char kAgentTokenAudience[] = "peregrine.dev";
// The kubelet refreshes the projected token; the agent's copy must outlive a slow first
// registration (a controller down for a while), so it is issued for a day.
constexpr int kAgentTokenSeconds = 86400;
constexpr char kCaDir[] = "/var/run/peregrine/ca";
constexpr char kCaVolume[] = "peregrine-ca";
constexpr char kInitContainer[] = "peregrine-agent-install";
constexpr char kCredentialInitContainer[] = "peregrine-agent-credential";

// Appends `item` to the array `list` unless an element with the same "name" exists
// (then that element is replaced: ours wins).
void PutNamed(json& list, json item) {
  if (!list.is_array()) list = json::array();
  for (json& existing : list) {
    if (existing.is_object() && existing.value("name", "") == item.value("name", "")) {
      existing = std::move(item);
      return;
    }
  }
  list.push_back(std::move(item));
}

// A resource quantity that is a plain non-negative integer (8 or "8"); nullopt otherwise
// (GPUs are whole devices: "500m" or "1Ki" is not a GPU count).
std::optional<long long> IntegerQuantity(const json& q) {
  if (q.is_number_integer()) return q.get<long long>();
  if (!q.is_string()) return std::nullopt;
  const std::string s = q.get<std::string>();
  if (s.empty() || s.size() > 9) return std::nullopt;
  long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Gives the training container nvidia.com/gpu = gpusPerMachine (limit, and request when
// the template sets one): a machine of the job is exactly gpusPerMachine GPUs. An explicit
// value that differs cannot run the layout and is kInvalidArgument.
absl::Status SetGpuLimit(const TrainingJob& job, json& trainer) {
  const std::string want = absl::StrCat(job.spec.gpus_per_machine);
  json& resources = trainer["resources"];
  if (resources.is_null()) resources = json::object();
  if (!resources.is_object()) return absl::InvalidArgumentError("spec.template.spec.containers[0].resources: not an object");
  for (const char* kind : {"limits", "requests"}) {
    const json* list = Path(resources, {kind});
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.template.spec.containers[0].resources.", kind, ": not an object"));
    }
    auto it = list->find(kGpuResource);
    if (it == list->end()) continue;
    const std::optional<long long> have = IntegerQuantity(*it);
    if (!have.has_value() || *have != job.spec.gpus_per_machine) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.template.spec.containers[0].resources.%s.%s: %s conflicts with spec.gpusPerMachine = %d (leave it "
          "out: the controller sets it)",
          kind, kGpuResource, it->dump(), job.spec.gpus_per_machine));
    }
  }
  if (!resources.contains("limits") || resources["limits"].is_null()) resources["limits"] = json::object();
  resources["limits"][kGpuResource] = want;
  if (resources.contains("requests") && resources["requests"].is_object() &&
      resources["requests"].contains(kGpuResource)) {
    resources["requests"][kGpuResource] = want;
  }
  return absl::OkStatus();
}

// spec.checkpoint.persistPath in a pod: the persisted copies are the fallback when no pod
// kept a step in memory, so they must outlive the pods: the directory must be at or under
// a writable volumeMount of the training container (the template's first container) whose
// volume is not one that goes with the pod (emptyDir) or is read-only by nature.
absl::Status ValidatePersistPath(const TrainingJob& job) {
  const CheckpointSpec& c = job.spec.checkpoint;
  if (c.persist_every_steps <= 0) return absl::OkStatus();
  constexpr char kHow[] =
      "mount a persistentVolumeClaim or hostPath volume at or above it in spec.template.spec.containers[0]";
  if (c.persist_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.checkpoint.persistPath: required when spec.checkpoint.persistEverySteps > 0 in Kubernetes (", kHow, ")"));
  }
  json tmpl = json::parse(job.spec.template_json.empty() ? "{}" : job.spec.template_json, nullptr, false);
  const json* mounts = tmpl.is_object() ? Path(tmpl, {"spec", "containers"}) : nullptr;
  mounts = mounts != nullptr && mounts->is_array() && !mounts->empty() ? Path((*mounts)[0], {"volumeMounts"}) : nullptr;
  const json mount_list = mounts != nullptr && mounts->is_array() ? *mounts : json::array();
  const json* best = nullptr;
  size_t best_length = 0;
  for (const json& m : mount_list) {
    std::string at = Str(m, "mountPath");
    while (at.size() > 1 && at.back() == '/') at.pop_back();
    if (at.empty()) continue;
    const bool covers = c.persist_path == at || at == "/" || absl::StartsWith(c.persist_path, at + "/");
    if (covers && at.size() >= best_length) {
      best = &m;
      best_length = at.size();
    }
  }
  if (best == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.persistPath: '", c.persist_path,
                                                   "' is not on a volume of the training container (", kHow, ")"));
  }
  const std::string name = Str(*best, "name");
  if (const json* ro = Path(*best, {"readOnly"}); ro != nullptr && ro->is_boolean() && ro->get<bool>()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.persistPath: '", c.persist_path,
                                                   "' is on the read-only volumeMount '", name, "'"));
  }
  const json* volumes = Path(tmpl, {"spec", "volumes"});
  for (const json& v : volumes != nullptr && volumes->is_array() ? *volumes : json::array()) {
    if (Str(v, "name") != name) continue;
    for (const char* ephemeral : {"emptyDir", "configMap", "secret", "downwardAPI", "projected"}) {
      if (v.contains(ephemeral)) {
        return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.persistPath: '", c.persist_path,
                                                       "' is on the ", ephemeral, " volume '", name,
                                                       "', which does not outlive the pod (", kHow, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> BuildPod(const TrainingJob& job, const PodToCreate& request, const PodBuildOptions& options) {
  json tmpl = json::object();
  if (!job.spec.template_json.empty()) {
    tmpl = json::parse(job.spec.template_json, nullptr, /*allow_exceptions=*/false);
    if (tmpl.is_discarded() || !tmpl.is_object()) {
      return absl::InvalidArgumentError("spec.template: not a JSON object (PodTemplateSpec)");
    }
  }
  json meta = tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : json::object();
  json spec = tmpl.contains("spec") && tmpl["spec"].is_object() ? tmpl["spec"] : json::object();
  // The image of the version the job runs (PodToCreate::image, from status.code), not the
  // desired spec's: a pending update or a rollback must not give one pod another image. A
  // version without an image runs the template's; spec.codeVersion.image only when the
  // template has none.
  const bool template_has_containers =
      spec.contains("containers") && spec["containers"].is_array() && !spec["containers"].empty();
  const bool template_has_image = template_has_containers && spec["containers"][0].is_object() &&
                                  !Str(spec["containers"][0], "image").empty();
  const std::string image =
      !request.image.empty() ? request.image : template_has_image ? std::string() : job.spec.code.image;
  if (!template_has_containers) {
    if (image.empty()) {
      return absl::InvalidArgumentError(
          "spec.template.spec.containers: the pod template needs a container (or set spec.codeVersion.image)");
    }
    spec["containers"] = json::array({json{{"name", "trainer"}}});
  }
  json& trainer = spec["containers"][0];
  if (!trainer.is_object()) return absl::InvalidArgumentError("spec.template.spec.containers[0]: not an object");
  if (!image.empty()) trainer["image"] = image;
  if (Str(trainer, "image").empty()) {
    return absl::InvalidArgumentError("spec.template.spec.containers[0].image: required (or set spec.codeVersion.image)");
  }
  if (Str(trainer, "name").empty()) trainer["name"] = "trainer";
  if (auto s = SetGpuLimit(job, trainer); !s.ok()) return s;

  const bool standby = request.role == PodRole::kStandby;
  json command = json::array({kAgentBinary, "--controller", options.controller_address, "--job",
                              absl::StrCat(job.metadata.namespace_, "/", job.metadata.name), "--pod", request.name,
                              "--role", standby ? "standby" : "active", "--machine-id", "$(NODE_NAME)"});
  if (options.heartbeat_ms > 0) {
    command.push_back("--heartbeat-ms");
    command.push_back(absl::StrCat(options.heartbeat_ms));
  }
  if (options.host_inspections_on_node) {
    command.push_back("--host-inspections");
    command.push_back("node");
  }
  if (options.agent_tls) {
    command.push_back("--tls-ca");
    command.push_back(absl::StrCat(kCaDir, "/", kJobCaKey));
  }
  trainer["command"] = std::move(command);
  trainer.erase("args");
  PutNamed(trainer["env"], json{{"name", "NODE_NAME"},
                                {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}});
  PutNamed(trainer["env"],
           json{{"name", "PEREGRINE_CREDENTIAL_FILE"}, {"value", absl::StrCat(kCredentialDir, "/bootstrap")}});
  PutNamed(trainer["env"], json{{"name", "PEREGRINE_DIAGNOSE_BIN"}, {"value", kDiagnoseBinary}});
  if (job.spec.fail_slow.enabled) {  // the agent preloads the NCCL hook into training processes
    PutNamed(trainer["env"], json{{"name", "PEREGRINE_NCCL_HOOK"}, {"value", kNcclHook}});
  }
  PutNamed(trainer["volumeMounts"], json{{"name", kBinVolume}, {"mountPath", kAgentBinDir}, {"readOnly", true}});
  // Writable: the agent removes the bootstrap file once read.
  PutNamed(trainer["volumeMounts"], json{{"name", kCredentialVolume}, {"mountPath", kCredentialDir}});
  if (options.agent_tls) {
    PutNamed(trainer["volumeMounts"], json{{"name", kCaVolume}, {"mountPath", kCaDir}, {"readOnly", true}});
  }

  json init = {{"name", kInitContainer},
               {"image", options.agent_image},
               {"command",
                json::array({"cp", "-a", absl::StrCat(kAgentImagePrefix, "/."), absl::StrCat(kAgentBinDir, "/")})},
               {"volumeMounts", json::array({json{{"name", kBinVolume}, {"mountPath", kAgentBinDir}}})}};
  // The only container that sees the service-account token; it leaves a copy the agent
  // can read and remove, owned by the training container's user.
  json credential = {
      {"name", kCredentialInitContainer},
      {"image", options.agent_image},
      {"command", json::array({"install", "-m", "0400", absl::StrCat(kServiceAccountTokenDir, "/token"),
                               absl::StrCat(kCredentialDir, "/bootstrap")})},
      {"volumeMounts",
       json::array({json{{"name", kServiceAccountTokenVolume}, {"mountPath", kServiceAccountTokenDir}, {"readOnly", true}},
                    json{{"name", kCredentialVolume}, {"mountPath", kCredentialDir}}})}};
  if (const json* sc = Path(trainer, {"securityContext"}); sc != nullptr && sc->is_object()) {
    for (const char* key : {"runAsUser", "runAsGroup", "runAsNonRoot"}) {
      if (sc->contains(key)) credential["securityContext"][key] = (*sc)[key];
    }
  }
  json inits = json::array({init, credential});
  if (spec.contains("initContainers") && spec["initContainers"].is_array()) {
    for (const json& c : spec["initContainers"]) {
      if (Str(c, "name") != kInitContainer && Str(c, "name") != kCredentialInitContainer) inits.push_back(c);
    }
  }
  spec["initContainers"] = std::move(inits);
  PutNamed(spec["volumes"], json{{"name", kBinVolume}, {"emptyDir", json::object()}});
  PutNamed(spec["volumes"],
           json{{"name", kServiceAccountTokenVolume},
                {"projected",
                 {{"sources", json::array({json{{"serviceAccountToken",
                                                 {{"audience", kAgentTokenAudience},
                                                  {"expirationSeconds", kAgentTokenSeconds},
                                                  {"path", "token"}}}}})}}}});
  PutNamed(spec["volumes"], json{{"name", kCredentialVolume}, {"emptyDir", {{"medium", "Memory"}}}});
  if (options.agent_tls) {
    PutNamed(spec["volumes"], json{{"name", kCaVolume}, {"configMap", {{"name", JobCaConfigMapName(job)}}}});
  }
  spec["restartPolicy"] = "Never";
  spec["hostname"] = request.name;
  spec["subdomain"] = JobServiceName(job);
  spec["terminationGracePeriodSeconds"] = job.spec.fault_tolerance.restart_grace_seconds + 5;

  meta.erase("name");
  meta.erase("generateName");
  meta["name"] = request.name;
  meta["namespace"] = job.metadata.namespace_;
  if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = json::object();
  meta["labels"][kJobLabel] = job.metadata.name;
  meta["labels"][kRoleLabel] = standby ? "standby" : "active";
  if (!standby) {
    meta["labels"][kSlotLabel] = absl::StrCat(request.slot);
  } else {
    meta["labels"].erase(kSlotLabel);
  }
  meta["ownerReferences"] = json::array({JobOwnerReference(job)});
  return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", std::move(meta)}, {"spec", std::move(spec)}};
}

absl::Status ValidateForKubernetes(const TrainingJob& job) {
  if (job.metadata.name.size() > static_cast<size_t>(kMaxJobNameLength)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata.name: '%s' has %d characters, at most %d fit the pod hostnames <job>-m<slot>-<serial> (63)",
        job.metadata.name, job.metadata.name.size(), kMaxJobNameLength));
  }
  PodBuildOptions options;
  options.controller_address = "controller:7400";
  options.agent_image = "agent";
  const int last = std::max(job.spec.machines - 1, 0);
  const PodToCreate pods[] = {
      PodToCreate{absl::StrCat(job.metadata.name, "-m", last), PodRole::kActive, last, job.spec.code.image},
      PodToCreate{absl::StrCat(job.metadata.name, "-s0"), PodRole::kStandby, -1, job.spec.code.image}};
  for (const PodToCreate& pod : pods) {
    if (auto built = BuildPod(job, pod, options); !built.ok()) return built.status();
  }
  return ValidatePersistPath(job);
}

}  // namespace peregrine
