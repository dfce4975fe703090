#include "controller/kube/pod_observer.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "controller/kube/json_fields.h"

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

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

}  // namespace

// Kubernetes says why a pod ended in several places; each of these names a cause that is
// the workload's or the cluster's scheduling, not the node's hardware:
//   - a container terminated with reason OOMKilled (its memory limit, or the node's OOM
//     killer choosing it);
//   - status.reason Evicted (the kubelet's node-pressure eviction: memory, disk, PIDs) or
//     Preempting (the kubelet admitted a critical pod in its place);
//   - condition DisruptionTarget=True with reason PreemptionByScheduler (a higher-priority
//     pod), EvictionByEvictionAPI (kubectl drain, the eviction API) or
//     TerminationByKubelet (node-pressure eviction); DeletionByTaintManager is not among
//     them: the node's NoExecute taint (unreachable, not ready) is the node's;
//   - metadata.deletionTimestamp set: someone deleted it (Peregrine deletes only pods it
//     has already taken out of the job, which it no longer observes).
std::string NotMachineFaultReason(const json& pod) {
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    const json* statuses = Path(pod, {"status", list});
    if (statuses == nullptr || !statuses->is_array()) continue;
    for (const json& cs : *statuses) {
      // The current state only: a container that was OOMKilled before and restarted runs.
      const json* t = Path(cs, {"state", "terminated"});
      if (t != nullptr && t->is_object() && Str(*t, "reason") == "OOMKilled") {
        return absl::StrFormat("container %s OOMKilled (exit code %d)", Str(cs, "name"), t->value("exitCode", 0));
      }
    }
  }
  if (const json* status = Path(pod, {"status"}); status != nullptr && status->is_object()) {
    const std::string reason = Str(*status, "reason");
    if (reason == "Evicted" || reason == "Preempting") {
      const std::string message = Str(*status, "message");
      return absl::StrCat("pod ", reason, message.empty() ? "" : ": ", message.substr(0, 200));
    }
  }
  if (const json* conds = Path(pod, {"status", "conditions"}); conds && conds->is_array()) {
    for (const json& c : *conds) {
      if (Str(c, "type") != "DisruptionTarget" || Str(c, "status") != "True") continue;
      const std::string reason = Str(c, "reason");
      if (reason == "PreemptionByScheduler" || reason == "PreemptionByKubeScheduler" ||
          reason == "EvictionByEvictionAPI" || reason == "TerminationByKubelet") {
        const std::string message = Str(c, "message");
        return absl::StrCat("pod disrupted (", reason, ")", message.empty() ? "" : ": ", message.substr(0, 200));
      }
    }
  }
  if (const json* deleted = Path(pod, {"metadata", "deletionTimestamp"}); deleted != nullptr && deleted->is_string()) {
    return absl::StrCat("pod deleted (deletionTimestamp ", deleted->get<std::string>(), "), not by Peregrine");
  }
  return "";
}

std::string NodeReadyStatus(const json& node) {
  const json* conds = Path(node, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return "";
  for (const json& c : *conds) {
    if (Str(c, "type") == "Ready") return Str(c, "status");
  }
  return "";
}

std::string PodStuckReason(const json& pod) {
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

PodObservation ObservePodObject(const json& pod, const json* node) {
  PodObservation obs;
  obs.name = Str(pod["metadata"], "name");
  if (const json* created = Path(pod, {"metadata", "creationTimestamp"}); created != nullptr && created->is_string()) {
    absl::Time t;
    std::string error;
    if (absl::ParseTime(absl::RFC3339_full, created->get<std::string>(), &t, &error)) obs.created_at = absl::ToUnixNanos(t);
  }
  if (const json* containers = Path(pod, {"spec", "containers"});
      containers != nullptr && containers->is_array() && !containers->empty() && (*containers)[0].is_object()) {
    obs.image = Str((*containers)[0], "image");  // the training container (BuildPod puts it first)
  }
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
  if (const std::string blameless = NotMachineFaultReason(pod); !blameless.empty() && !(phase == "Succeeded")) {
    obs.running = false;
    obs.failed = true;
    obs.not_machine_fault = true;
    obs.reason = blameless;
    return obs;
  }
  if (!obs.machine_id.empty() && !obs.failed && node != nullptr) {
    const std::string ready = NodeReadyStatus(*node);
    if (ready == "False" || ready == "Unknown") {
      obs.node_unready = true;
      obs.reason = absl::StrCat("node ", obs.machine_id, " NotReady (Ready=", ready, ")");
    }
  }
  if (obs.running || obs.failed) return obs;
  obs.waiting_reason = PodStuckReason(pod);
  return obs;
}

}  // namespace peregrine
