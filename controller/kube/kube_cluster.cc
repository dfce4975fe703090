#include "controller/kube/kube_cluster.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr char kAgentBinDir[] = "/peregrine";
constexpr char kAgentBinary[] = "/peregrine/bin/peregrine-agent";
constexpr char kNcclHook[] = "/peregrine/lib/libperegrine_nccl.so";
// The diagnostics helper the agent runs (stop-time diagnosis, fail-slow validation); its
// tools (peregrine-nccl-check, peregrine-gemm, ...) are its neighbours in /peregrine/bin.
constexpr char kDiagnoseBinary[] = "/peregrine/bin/peregrine-diagnose";
constexpr char kTokenDir[] = "/var/run/peregrine/token";
constexpr char kTokenKey[] = "token";
constexpr char kBinVolume[] = "peregrine-bin";
constexpr char kTokenVolume[] = "peregrine-token";
constexpr char kInitContainer[] = "peregrine-agent-install";

json OwnerReference(const TrainingJob& job) {
  return json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"name", job.metadata.name},
              {"uid", job.metadata.uid},  {"controller", true},  {"blockOwnerDeletion", true}};
}

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

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const json* Path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// "Ready" condition of a node: "True", "False", "Unknown" or "" when absent.
std::string NodeReady(const json& node) {
  const json* conds = Path(node, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return "";
  for (const json& c : *conds) {
    if (Str(c, "type") == "Ready") return Str(c, "status");
  }
  return "";
}

// Why a terminated pod stopped: the first terminated container's reason and exit code,
// else the pod's own reason/message.
std::string TerminationReason(const json& pod, const std::string& phase) {
  if (const json* statuses = Path(pod, {"status", "containerStatuses"}); statuses && statuses->is_array()) {
    for (const json& cs : *statuses) {
      const json* t = Path(cs, {"state", "terminated"});
      if (t == nullptr) t = Path(cs, {"lastState", "terminated"});
      if (t == nullptr || !t->is_object()) continue;
      return absl::StrFormat("container %s terminated (%s, exit code %d)", Str(cs, "name"),
                             Str(*t, "reason").empty() ? "no reason" : Str(*t, "reason"),
                             t->value("exitCode", 0));
    }
  }
  const json* status = Path(pod, {"status"});
  std::string reason = status ? Str(*status, "reason") : "";
  std::string message = status ? Str(*status, "message") : "";
  if (!reason.empty() || !message.empty()) return absl::StrCat("pod ", phase, ": ", reason, reason.empty() ? "" : " ", message);
  return absl::StrCat("pod ", phase);
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

// Why a Pending pod cannot start, or "" when it is just on its way (ContainerCreating,
// PodInitializing, waiting to be scheduled without a verdict yet).
std::string StuckReason(const json& pod) {
  static const std::set<std::string>* const kStuck = new std::set<std::string>{
      "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
      "RunContainerError"};
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    const json* statuses = Path(pod, {"status", list});
    if (statuses == nullptr || !statuses->is_array()) continue;
    for (const json& cs : *statuses) {
      const json* waiting = Path(cs, {"state", "waiting"});
      if (waiting == nullptr || !waiting->is_object()) continue;
      const std::string reason = Str(*waiting, "reason");
      if (!kStuck->count(reason)) continue;
      const std::string message = Str(*waiting, "message");
      return absl::StrCat(reason, " (container ", Str(cs, "name"), ")", message.empty() ? "" : ": ",
                          message.substr(0, 200));
    }
  }
  if (const json* conds = Path(pod, {"status", "conditions"}); conds && conds->is_array()) {
    for (const json& c : *conds) {
      if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False" && Str(c, "reason") == "Unschedulable") {
        const std::string message = Str(c, "message");
        return absl::StrCat("Unschedulable", message.empty() ? "" : ": ", message.substr(0, 200));
      }
    }
  }
  return "";
}

std::string NewToken() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return absl::StrFormat("%016x%016x", gen(), gen());
}

}  // namespace

kube::ResourcePath TrainingJobsPath(const std::string& ns) {
  return kube::ResourcePath{"peregrine.dev", "v1alpha1", "trainingjobs", ns};
}
kube::ResourcePath PodsPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "pods", ns}; }
kube::ResourcePath NodesPath() { return kube::ResourcePath{"", "v1", "nodes", ""}; }
kube::ResourcePath ServicesPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "services", ns}; }
kube::ResourcePath SecretsPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "secrets", ns}; }

std::vector<std::string> PodJobIndex(const json& pod) {
  const json* job = Path(pod, {"metadata", "labels", kJobLabel});
  if (job == nullptr || !job->is_string() || job->get<std::string>().empty()) return {};
  const json* ns = Path(pod, {"metadata", "namespace"});
  return {absl::StrCat(ns && ns->is_string() ? ns->get<std::string>() : "", "/", job->get<std::string>())};
}

std::string JobServiceName(const TrainingJob& job) { return job.metadata.name; }
std::string JobSecretName(const TrainingJob& job) { return absl::StrCat(job.metadata.name, "-peregrine-token"); }

std::string ShortLabelValue(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (out.size() >= 63) break;
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.' || c == '_' || c == '-') {
      out.push_back(c);
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  size_t first = 0;
  while (first < out.size() && !std::isalnum(static_cast<unsigned char>(out[first]))) ++first;
  out = out.substr(first);
  return out.empty() ? "unknown" : out;
}

absl::StatusOr<json> BuildPod(const TrainingJob& job, const PodToCreate& request, const KubeClusterOptions& options) {
  json tmpl = json::object();
  if (!job.spec.template_json.empty()) {
    tmpl = json::parse(job.spec.template_json, nullptr, /*allow_exceptions=*/false);
    if (tmpl.is_discarded() || !tmpl.is_object()) {
      return absl::InvalidArgumentError("spec.template: not a JSON object (PodTemplateSpec)");
    }
  }
  json meta = tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : json::object();
  json spec = tmpl.contains("spec") && tmpl["spec"].is_object() ? tmpl["spec"] : json::object();
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty()) {
    if (job.spec.code.image.empty()) {
      return absl::InvalidArgumentError(
          "spec.template.spec.containers: the pod template needs a container (or set spec.codeVersion.image)");
    }
    spec["containers"] = json::array({json{{"name", "trainer"}}});
  }
  json& trainer = spec["containers"][0];
  if (!trainer.is_object()) return absl::InvalidArgumentError("spec.template.spec.containers[0]: not an object");
  if (!job.spec.code.image.empty()) trainer["image"] = job.spec.code.image;
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
  trainer["command"] = std::move(command);
  trainer.erase("args");
  PutNamed(trainer["env"], json{{"name", "NODE_NAME"},
                                {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}});
  PutNamed(trainer["env"], json{{"name", "PEREGRINE_TOKEN_FILE"}, {"value", absl::StrCat(kTokenDir, "/", kTokenKey)}});
  PutNamed(trainer["env"], json{{"name", "PEREGRINE_DIAGNOSE_BIN"}, {"value", kDiagnoseBinary}});
  if (job.spec.fail_slow.enabled) {  // the agent preloads the NCCL hook into training processes
    PutNamed(trainer["env"], json{{"name", "PEREGRINE_NCCL_HOOK"}, {"value", kNcclHook}});
  }
  PutNamed(trainer["volumeMounts"], json{{"name", kBinVolume}, {"mountPath", kAgentBinDir}, {"readOnly", true}});
  PutNamed(trainer["volumeMounts"], json{{"name", kTokenVolume}, {"mountPath", kTokenDir}, {"readOnly", true}});

  json init = {{"name", kInitContainer},
               {"image", options.agent_image},
               {"command",
                json::array({"cp", "-a", absl::StrCat(kAgentImagePrefix, "/."), absl::StrCat(kAgentBinDir, "/")})},
               {"volumeMounts", json::array({json{{"name", kBinVolume}, {"mountPath", kAgentBinDir}}})}};
  json inits = json::array({init});
  if (spec.contains("initContainers") && spec["initContainers"].is_array()) {
    for (const json& c : spec["initContainers"]) {
      if (Str(c, "name") != kInitContainer) inits.push_back(c);
    }
  }
  spec["initContainers"] = std::move(inits);
  PutNamed(spec["volumes"], json{{"name", kBinVolume}, {"emptyDir", json::object()}});
  PutNamed(spec["volumes"], json{{"name", kTokenVolume},
                                 {"secret", {{"secretName", JobSecretName(job)}, {"defaultMode", 0440}}}});
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
  meta["ownerReferences"] = json::array({OwnerReference(job)});
  return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", std::move(meta)}, {"spec", std::move(spec)}};
}

PodObservation ObservePod(const json& pod, const json* node, absl::Time now, absl::Duration standby_pending_timeout) {
  PodObservation obs;
  obs.name = Str(pod["metadata"], "name");
  const json* node_name = Path(pod, {"spec", "nodeName"});
  obs.machine_id = node_name && node_name->is_string() ? node_name->get<std::string>() : "";
  const json* phase_json = Path(pod, {"status", "phase"});
  const std::string phase = phase_json && phase_json->is_string() ? phase_json->get<std::string>() : "Pending";
  if (phase == "Failed" || phase == "Succeeded") {
    obs.failed = true;
    obs.reason = TerminationReason(pod, phase);
  } else if (phase == "Running") {
    obs.running = true;
  }
  if (!obs.machine_id.empty() && !obs.failed && node != nullptr) {
    const std::string ready = NodeReady(*node);
    if (ready == "False" || ready == "Unknown") {
      obs.running = false;
      obs.failed = true;
      obs.reason = absl::StrCat("node ", obs.machine_id, " NotReady");
    }
  }
  if (obs.running || obs.failed) return obs;
  obs.waiting_reason = StuckReason(pod);
  if (obs.waiting_reason.empty()) return obs;
  const json* role = Path(pod, {"metadata", "labels", kRoleLabel});
  const json* created = Path(pod, {"metadata", "creationTimestamp"});
  absl::Time created_at;
  std::string parse_error;
  if (role == nullptr || *role != "standby" || created == nullptr || !created->is_string() ||
      !absl::ParseTime(absl::RFC3339_full, created->get<std::string>(), &created_at, &parse_error)) {
    return obs;
  }
  const absl::Duration pending = now - created_at;
  if (pending >= standby_pending_timeout) {
    obs.failed = true;
    obs.reason = absl::StrCat("stuck Pending for ", absl::FormatDuration(absl::Trunc(pending, absl::Seconds(1))),
                              ": ", obs.waiting_reason);
    obs.machine_id.clear();  // an image or scheduling problem is not the node's fault
  }
  return obs;
}

std::string StuckPodsMessage(const std::vector<PodObservation>& pods) {
  constexpr int kMaxListed = 5;
  std::vector<std::string> parts;
  int more = 0;
  for (const PodObservation& p : pods) {
    if (p.waiting_reason.empty()) continue;
    if (static_cast<int>(parts.size()) < kMaxListed) {
      parts.push_back(absl::StrCat(p.name, ": ", p.waiting_reason));
    } else {
      ++more;
    }
  }
  std::string out = absl::StrJoin(parts, "; ");
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

absl::Status ValidateForKubernetes(const TrainingJob& job) {
  if (job.metadata.name.size() > static_cast<size_t>(kMaxJobNameLength)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata.name: '%s' has %d characters, at most %d fit the pod hostnames <job>-m<slot>-<serial> (63)",
        job.metadata.name, job.metadata.name.size(), kMaxJobNameLength));
  }
  KubeClusterOptions options;
  options.controller_address = "controller:7400";
  options.agent_image = "agent";
  const int last = std::max(job.spec.machines - 1, 0);
  for (const PodToCreate& pod : {PodToCreate{absl::StrCat(job.metadata.name, "-m", last), PodRole::kActive, last},
                                 PodToCreate{absl::StrCat(job.metadata.name, "-s0"), PodRole::kStandby, -1}}) {
    if (auto built = BuildPod(job, pod, options); !built.ok()) return built.status();
  }
  return absl::OkStatus();
}

KubeCluster::KubeCluster(kube::RestClient* client, kube::Informer* pods, kube::Informer* nodes,
                         kube::EventRecorder* events, KubeClusterOptions options, std::function<bool()> may_write)
    : client_(client),
      pods_(pods),
      nodes_(nodes),
      events_(events),
      options_(std::move(options)),
      may_write_(std::move(may_write)) {}

absl::Status KubeCluster::CheckMayWrite(const char* what) const {
  if (may_write_ && !may_write_()) {
    return absl::UnavailableError(absl::StrCat(what, ": this replica does not hold the leader lease"));
  }
  return absl::OkStatus();
}

absl::Status KubeCluster::CreatePod(const TrainingJob& job, const PodToCreate& request) {
  if (pods_->Get(absl::StrCat(job.metadata.namespace_, "/", request.name)) != nullptr) return absl::OkStatus();
  auto pod = BuildPod(job, request, options_);
  if (!pod.ok()) return pod.status();
  if (auto s = CheckMayWrite("create pod"); !s.ok()) return s;
  auto created = client_->Create(PodsPath(job.metadata.namespace_), *pod);
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  return absl::OkStatus();
}

absl::Status KubeCluster::DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) {
  kube::DeleteOptions options;
  options.grace_period_seconds = (grace_ms + 999) / 1000;
  kube::ObjectPtr cached = pods_->Get(absl::StrCat(job.metadata.namespace_, "/", name));
  if (cached != nullptr) {
    if (const json* ts = Path(*cached, {"metadata", "deletionTimestamp"}); ts != nullptr && !ts->is_null()) {
      return absl::OkStatus();  // already being deleted
    }
    if (const json* uid = Path(*cached, {"metadata", "uid"}); uid && uid->is_string()) {
      options.precondition_uid = uid->get<std::string>();
    }
  }
  if (auto s = CheckMayWrite("delete pod"); !s.ok()) return s;
  absl::Status s = client_->Delete(PodsPath(job.metadata.namespace_), name, options);
  if (absl::IsNotFound(s)) return absl::OkStatus();
  return s;
}

absl::StatusOr<std::vector<PodObservation>> KubeCluster::ListPods(const TrainingJob& job) {
  if (!pods_->HasSynced()) return absl::UnavailableError("the pod cache has not synced yet");
  std::vector<PodObservation> out;
  const absl::Time now = absl::Now();
  for (const kube::ObjectPtr& pod : pods_->ByIndex(kPodsByJobIndex, absl::StrCat(job.metadata.namespace_, "/",
                                                                                   job.metadata.name))) {
    if (const json* ts = Path(*pod, {"metadata", "deletionTimestamp"}); ts != nullptr && !ts->is_null()) continue;
    // A pod of an older job with the same name is not this job's.
    if (const json* refs = Path(*pod, {"metadata", "ownerReferences"}); refs && refs->is_array() && !job.metadata.uid.empty()) {
      bool owned = false;
      for (const json& r : *refs) owned = owned || Str(r, "uid") == job.metadata.uid;
      if (!owned) continue;
    }
    kube::ObjectPtr node;
    if (const json* n = Path(*pod, {"spec", "nodeName"}); n && n->is_string() && !n->get<std::string>().empty()) {
      node = nodes_->Get(n->get<std::string>());
    }
    out.push_back(ObservePod(*pod, node.get(), now, options_.standby_pending_timeout));
  }
  absl::MutexLock lock(&stuck_mu_);
  stuck_[absl::StrCat(job.metadata.namespace_, "/", job.metadata.name)].seen = StuckPodsMessage(out);
  return out;
}

void KubeCluster::ForgetJob(const TrainingJob& job) {
  absl::MutexLock lock(&stuck_mu_);
  stuck_.erase(absl::StrCat(job.metadata.namespace_, "/", job.metadata.name));
}

bool KubeCluster::StuckPodsChanged(const TrainingJob& job) {
  absl::MutexLock lock(&stuck_mu_);
  auto it = stuck_.find(absl::StrCat(job.metadata.namespace_, "/", job.metadata.name));
  if (it == stuck_.end()) return false;
  return it->second.written_once ? it->second.seen != it->second.written : !it->second.seen.empty();
}

std::vector<std::string> KubeCluster::CachedPodNames(const TrainingJob& job) {
  std::vector<std::string> out;
  for (const kube::ObjectPtr& pod :
       pods_->ByIndex(kPodsByJobIndex, absl::StrCat(job.metadata.namespace_, "/", job.metadata.name))) {
    out.push_back(Str((*pod)["metadata"], "name"));
  }
  return out;
}

absl::Status KubeCluster::QuarantineMachine(const std::string& machine_id, const std::string& reason) {
  if (machine_id.empty()) return absl::InvalidArgumentError("quarantine: empty machine id");
  if (auto s = CheckMayWrite("quarantine node"); !s.ok()) return s;
  json patch = {{"spec", {{"unschedulable", true}}},
                {"metadata",
                 {{"labels", {{kQuarantineLabel, ShortLabelValue(reason)}}},
                  {"annotations", {{kQuarantineReasonAnnotation, reason.substr(0, 1024)}}}}}};
  auto patched = client_->MergePatch(NodesPath(), machine_id, patch);
  if (absl::IsNotFound(patched.status())) return absl::OkStatus();  // the machine is gone already
  if (!patched.ok()) return patched.status();
  // The node's own Event (kubectl describe node shows why it is cordoned); the kubelet
  // uses the node name as the involved object's uid.
  kube::ObjectReference ref{"v1", "Node", "", machine_id, machine_id};
  return events_->Record(ref, kube::EventType::kWarning, "PeregrineQuarantined",
                         absl::StrCat("cordoned by peregrine-controller: ", reason));
}

absl::Status KubeCluster::RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t) {
  if (auto s = CheckMayWrite("record event"); !s.ok()) return s;
  kube::ObjectReference ref{"peregrine.dev/v1alpha1", "TrainingJob", job.metadata.namespace_, job.metadata.name,
                            job.metadata.uid};
  return events_->Record(ref, event.type == "Warning" ? kube::EventType::kWarning : kube::EventType::kNormal,
                         event.reason, event.message);
}

absl::Status KubeCluster::PersistStatus(const TrainingJob& job, const JobStatus& engine_status) {
  JobStatus status = engine_status;
  const std::string key = absl::StrCat(job.metadata.namespace_, "/", job.metadata.name);
  std::string stuck_message;
  int64_t since_ns = 0;
  {
    absl::MutexLock lock(&stuck_mu_);
    const StuckState& st = stuck_[key];
    stuck_message = st.seen;
    const bool stuck = !stuck_message.empty();
    since_ns = st.written_once && st.stuck == stuck ? st.since_ns : absl::ToUnixNanos(absl::Now());
    // A condition already in the status (a restarted controller) keeps its time.
    for (const Condition& c : status.conditions) {
      if (!st.written_once && c.type == kPodsStuckCondition && (c.status == "True") == stuck) {
        since_ns = c.last_transition_time;
      }
    }
  }
  const bool stuck = !stuck_message.empty();
  // The reason is the first stuck pod's ("<pod>: <Reason> ...").
  std::string reason = "NoStuckPods";
  if (stuck) {
    const size_t start = stuck_message.find(": ") + 2;
    reason = stuck_message.substr(start, stuck_message.find_first_of(" :;", start) - start);
  }
  Condition cond{kPodsStuckCondition, stuck ? "True" : "False", reason,
                 stuck ? stuck_message : "no pod of the job is stuck", job.metadata.generation, since_ns};
  bool found = false;
  for (Condition& c : status.conditions) {
    if (c.type == kPodsStuckCondition) {
      c = cond;
      found = true;
    }
  }
  if (!found) status.conditions.push_back(cond);
  json body = json::parse(JobStatusToJson(status), nullptr, false);
  if (body.is_discarded()) return absl::InternalError("JobStatusToJson produced invalid JSON");
  if (auto s = CheckMayWrite("write status"); !s.ok()) return s;
  auto written = kube::UpdateWithRetryOnConflict(
      *client_, TrainingJobsPath(job.metadata.namespace_), job.metadata.name, /*status_subresource=*/true,
      [&](json& object) -> absl::Status {
        if (!job.metadata.uid.empty() && Str(object["metadata"], "uid") != job.metadata.uid) {
          return absl::FailedPreconditionError(
              absl::StrCat("trainingjob ", job.metadata.name, " was re-created (uid changed)"));
        }
        // Re-checked on every retry: a lost Lease stops the retry loop too.
        if (auto s = CheckMayWrite("write status"); !s.ok()) return s;
        object["status"] = body;
        return absl::OkStatus();
      });
  if (!written.ok()) return written.status();
  absl::MutexLock lock(&stuck_mu_);
  StuckState& st = stuck_[key];
  st.written = stuck_message;
  st.written_once = true;
  st.stuck = stuck;
  st.since_ns = since_ns;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobStatus>> KubeCluster::LoadStatus(const TrainingJob& job) {
  auto object = client_->Get(TrainingJobsPath(job.metadata.namespace_), job.metadata.name);
  if (absl::IsNotFound(object.status())) return std::optional<JobStatus>();
  if (!object.ok()) return object.status();
  if (!job.metadata.uid.empty() && Str((*object)["metadata"], "uid") != job.metadata.uid) {
    return std::optional<JobStatus>();
  }
  auto it = object->find("status");
  if (it == object->end() || !it->is_object() || !it->contains("phase")) return std::optional<JobStatus>();
  auto status = JobStatusFromJson(it->dump());
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat("trainingjob ", job.metadata.namespace_, "/", job.metadata.name,
                                            ": unreadable status: ", status.status().message()));
  }
  return std::optional<JobStatus>(*std::move(status));
}

std::string KubeCluster::RendezvousDomain(const TrainingJob& job) {
  return absl::StrCat(JobServiceName(job), ".", job.metadata.namespace_, ".svc");
}

absl::StatusOr<uint32_t> KubeCluster::RendezvousPort(const TrainingJob&) { return options_.rendezvous_port; }

absl::StatusOr<std::string> KubeCluster::EnsureJobObjects(const TrainingJob& job) {
  const std::string& ns = job.metadata.namespace_;
  json labels = {{kJobLabel, job.metadata.name}};
  json owners = json::array({OwnerReference(job)});
  // The token Secret: read it when it exists (the token must survive controller restarts).
  auto secret = client_->Get(SecretsPath(ns), JobSecretName(job));
  if (absl::IsNotFound(secret.status())) {
    if (auto s = CheckMayWrite("create secret"); !s.ok()) return s;
    json body = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", JobSecretName(job)}, {"namespace", ns}, {"labels", labels},
                               {"ownerReferences", owners}}},
                 {"type", "Opaque"},
                 {"data", {{kTokenKey, absl::Base64Escape(NewToken())}}}};
    secret = client_->Create(SecretsPath(ns), body);
    if (absl::IsAlreadyExists(secret.status())) secret = client_->Get(SecretsPath(ns), JobSecretName(job));
  }
  if (!secret.ok()) return secret.status();
  const json* data = Path(*secret, {"data", kTokenKey});
  std::string token;
  if (data == nullptr || !data->is_string() || !absl::Base64Unescape(data->get<std::string>(), &token) ||
      token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("secret ", ns, "/", JobSecretName(job), " has no data.token: delete it to get a new one"));
  }

  auto service = client_->Get(ServicesPath(ns), JobServiceName(job));
  if (absl::IsNotFound(service.status())) {
    if (auto s = CheckMayWrite("create service"); !s.ok()) return s;
    json body = {{"apiVersion", "v1"},
                 {"kind", "Service"},
                 {"metadata", {{"name", JobServiceName(job)}, {"namespace", ns}, {"labels", labels},
                               {"ownerReferences", owners}}},
                 {"spec",
                  {{"clusterIP", "None"},
                   {"selector", labels},
                   {"publishNotReadyAddresses", true},
                   {"ports", json::array({json{{"name", "rendezvous"},
                                               {"port", options_.rendezvous_port},
                                               {"targetPort", options_.rendezvous_port}}})}}}};
    service = client_->Create(ServicesPath(ns), body);
    if (absl::IsAlreadyExists(service.status())) service = json::object();
  }
  if (!service.ok()) return service.status();
  return token;
}

}  // namespace peregrine
