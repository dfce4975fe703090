#include "cli/kube_commands.h"

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/code_update_flags.h"
#include "cli/job_text.h"
#include "cli/kube_credentials.h"
#include "cli/kube_job_client.h"

namespace peregrine {

using nlohmann::json;

namespace {

// A namespace or object name as the API server accepts them (DNS subdomain characters,
// starting and ending with a letter or digit), so nothing else ever reaches a request path.
bool IsObjectName(const std::string& s) {
  if (s.empty() || s.size() > 253 || !absl::ascii_isalnum(s.front()) || !absl::ascii_isalnum(s.back())) return false;
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) return false;
  }
  return true;
}

// The string at `pointer`, or "" when absent or not a string.
std::string StringAt(const json& j, const char* pointer) {
  const json::json_pointer p(pointer);
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : "";
}

std::string KubeconfigName(const KubeCommandArgs& a) {
  if (!a.kubeconfig.empty()) return a.kubeconfig;
  return "the default kubeconfig ($KUBECONFIG or ~/.kube/config)";
}

}  // namespace

int RunKubeCommand(const KubeCommandArgs& a, std::ostream& out, std::ostream& err) {
  if (a.command != "update") {
    for (const auto& [flag, value] : a.flags) {
      err << "peregrinectl: unknown flag --" << flag << " for " << a.command << "\n";
      return 2;
    }
  }
  absl::StatusOr<CodeUpdateRequest> update;
  if (a.command == "update") {
    update = CodeUpdateFromFlags(a.flags);
    if (!update.ok()) {
      err << "peregrinectl: " << update.status().message() << "\n";
      return 2;
    }
  }
  std::string ns, name = a.job;
  if (const std::vector<std::string> parts = absl::StrSplit(a.job, '/'); parts.size() == 2) {
    ns = parts[0];
    name = parts[1];
    if (!a.namespace_.empty() && a.namespace_ != ns) {
      err << "peregrinectl: " << a.job << " names namespace " << ns << " but --namespace says " << a.namespace_ << "\n";
      return 2;
    }
  }
  if (!IsObjectName(name) || (!ns.empty() && !IsObjectName(ns)) ||
      (!a.namespace_.empty() && !IsObjectName(a.namespace_))) {
    err << "peregrinectl: '" << a.job << (a.namespace_.empty() ? "" : "' in namespace '" + a.namespace_)
        << "' is not a TrainingJob name (lowercase letters, digits, '-' and '.')\n";
    return 2;
  }

  absl::StatusOr<KubeEndpoint> endpoint = LoadKubeEndpoint(a.kubeconfig, a.context);
  if (!endpoint.ok()) {
    err << "peregrinectl: cannot use " << KubeconfigName(a) << (a.context.empty() ? "" : ", context " + a.context)
        << ": " << endpoint.status().message() << "\n";
    return 1;
  }
  if (!a.token.empty()) endpoint->token = a.token;
  if (ns.empty()) ns = a.namespace_.empty() ? endpoint->namespace_ : a.namespace_;
  absl::StatusOr<std::unique_ptr<KubeJobClient>> client = KubeJobClient::Create(*endpoint);
  if (!client.ok()) {
    err << "peregrinectl: " << client.status().message() << "\n";
    return 1;
  }
  auto fail = [&](const absl::Status& s) {
    err << "peregrinectl: " << s.message() << "\n";
    return 1;
  };
  absl::StatusOr<json> object = (*client)->GetJob(ns, name);
  if (!object.ok()) return fail(object.status());

  if (a.command == "update") {
    const json* annotations = nullptr;
    if (auto meta = object->find("metadata"); meta != object->end() && meta->is_object()) {
      if (auto it = meta->find("annotations"); it != meta->end() && it->is_object()) annotations = &*it;
    }
    const bool has_hot = annotations != nullptr && annotations->contains(kHotUpdateAnnotationName);
    absl::StatusOr<json> written = (*client)->MergePatchJob(ns, name, CodeUpdateMergePatch(*update, has_hot));
    if (!written.ok()) return fail(written.status());
    int64_t generation = 0;
    if (auto meta = written->find("metadata"); meta != written->end() && meta->is_object()) {
      if (auto g = meta->find("generation"); g != meta->end() && g->is_number()) generation = g->get<int64_t>();
    }
    out << "TrainingJob " << ns << "/" << name << " now asks for code revision " << update->revision << " (generation "
        << generation << "); "
        << (update->urgent ? "urgent: training restarts in place with it now"
                           : "lazy: applied at the next failure-triggered restart or when the hot-update window "
                             "expires")
        << "\n";
    return 0;
  }

  absl::StatusOr<json> view = JobViewFromObject(*object);
  if (!view.ok() && a.command == "timeline" && view.status().code() == absl::StatusCode::kFailedPrecondition) {
    view = json{{"namespace", ns}, {"name", name}, {"spec", (*object)["spec"]}, {"status", json::object()}};
  }
  if (!view.ok()) return fail(view.status());
  if (a.command == "status") {
    PrintJobStatus(*view, out);
  } else if (a.command == "incidents") {
    PrintJobIncidents(*view, out);
  } else {  // timeline
    absl::StatusOr<json> events = (*client)->ListJobEvents(ns, name);
    if (!events.ok()) return fail(events.status());
    // Events of an earlier job of the same name are not this job's.
    const std::string uid = StringAt(*object, "/metadata/uid");
    json mine = json::array();
    for (const json& e : *events) {
      const std::string involved_uid = StringAt(e, "/involvedObject/uid");
      if (uid.empty() || involved_uid.empty() || involved_uid == uid) mine.push_back(e);
    }
    PrintJobTimeline(*view, mine, out);
  }
  return 0;
}

}  // namespace peregrine
