#include "controller/kube/node_findings.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace peregrine {
namespace {

std::string Field(const nlohmann::json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string NodeFindingKind(const std::string& type) {
  if (type == kConditionKernelXid) return "xid";
  if (type == kConditionNic) return "network";
  if (type == kConditionDisk) return "host";
  if (type == kConditionGpu) return "gpu";
  return "";
}

std::vector<InspectionObservation> NodeFindings(const nlohmann::json& node) {
  std::vector<InspectionObservation> out;
  if (!node.is_object()) return out;
  auto status = node.find("status");
  if (status == node.end() || !status->is_object()) return out;
  auto conditions = status->find("conditions");
  if (conditions == status->end() || !conditions->is_array()) return out;
  for (const nlohmann::json& c : *conditions) {
    if (!c.is_object()) continue;
    const std::string type = Field(c, "type");
    const std::string kind = NodeFindingKind(type);
    if (kind.empty()) continue;
    const std::string value = Field(c, "status");
    const std::string reason = Field(c, "reason");
    InspectionObservation o;
    o.kind = kind;
    o.component = absl::StrCat("node/", type);
    if (value == "True") {
      o.status = reason == kReasonMachineFault || reason == kReasonFault ? InspectionStatus::kFault
                                                                        : InspectionStatus::kWarning;
      o.machine_attributed = reason == kReasonMachineFault;
    } else if (value == "Unknown") {
      o.status = reason == kReasonInspectionError ? InspectionStatus::kError : InspectionStatus::kCannotSee;
    } else {
      continue;  // "False" (or not a condition status): nothing found
    }
    o.summary = absl::StrCat("node inspector: ", Field(c, "message"));
    absl::Time t;
    std::string error;
    const std::string since = Field(c, "lastTransitionTime");
    if (!since.empty() && absl::ParseTime(absl::RFC3339_full, since, &t, &error)) o.at = absl::ToUnixNanos(t);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace peregrine
