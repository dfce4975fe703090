#include "node_inspector/node_conditions.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/kube/node_findings.h"

namespace peregrine {
namespace {

// Rank of a result for the condition (higher decides): problems first, then what keeps
// the inspector from telling, then health.
int Rank(const InspectionResult& r) {
  switch (r.status) {
    case InspectionOutcome::kFault: return r.machine_attributed ? 7 : 6;
    case InspectionOutcome::kWarning: return 5;
    case InspectionOutcome::kCannotSee: return 4;
    case InspectionOutcome::kError: return 3;
    case InspectionOutcome::kOk: return 2;
    case InspectionOutcome::kNotPresent: return 1;
  }
  return 0;
}

NodeConditionReport ReportFor(int rank) {
  NodeConditionReport r;
  switch (rank) {
    case 7: r.status = "True", r.reason = kReasonMachineFault; break;
    case 6: r.status = "True", r.reason = kReasonFault; break;
    case 5: r.status = "True", r.reason = kReasonWarning; break;
    case 4: r.status = "Unknown", r.reason = kReasonCannotSee; break;
    case 3: r.status = "Unknown", r.reason = kReasonInspectionError; break;
    case 2: r.status = "False", r.reason = kReasonNoProblem; break;
    default: r.status = "False", r.reason = kReasonNotPresent; break;
  }
  return r;
}

std::string Cut(std::string text) {
  if (text.size() <= kMaxConditionMessage) return text;
  size_t end = kMaxConditionMessage - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // UTF-8 boundary
  text.resize(end);
  return text + "...";
}

std::string TimeText(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

std::string Str(const nlohmann::json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string ConditionTypeOf(const InspectionResult& r) {
  if (r.kind == "xid") return kConditionKernelXid;
  if (r.kind == "host" && absl::StartsWith(r.component, "/dev/")) return kConditionDisk;
  if (r.kind == "network" || r.kind == "rdma") return kConditionNic;
  if (r.kind == "gpu") return kConditionGpu;
  return "";
}

std::vector<NodeConditionReport> ConditionsFromResults(const std::vector<InspectionResult>& results) {
  std::map<std::string, std::vector<const InspectionResult*>> by_type;
  for (const InspectionResult& r : results) {
    const std::string type = ConditionTypeOf(r);
    if (!type.empty()) by_type[type].push_back(&r);
  }
  std::vector<NodeConditionReport> out;
  for (const char* type : kNodeConditionTypes) {
    auto it = by_type.find(type);
    if (it == by_type.end()) continue;
    int worst = 0;
    for (const InspectionResult* r : it->second) worst = std::max(worst, Rank(*r));
    NodeConditionReport report = ReportFor(worst);
    report.type = type;
    std::vector<std::string> parts;
    for (const InspectionResult* r : it->second) {
      if (Rank(*r) == worst) parts.push_back(absl::StrCat(r->component, ": ", r->summary));
    }
    report.message = Cut(absl::StrJoin(parts, "; "));
    out.push_back(std::move(report));
  }
  return out;
}

std::vector<NodeConditionReport> CheckGpuVisibility(std::vector<NodeConditionReport> reports,
                                                    const nlohmann::json& node) {
  int64_t gpus = 0;
  if (node.is_object() && node.contains("status") && node["status"].is_object()) {
    const nlohmann::json& status = node["status"];
    auto alloc = status.find("allocatable");
    if (alloc != status.end() && alloc->is_object()) {
      auto g = alloc->find("nvidia.com/gpu");
      if (g != alloc->end() && g->is_string()) {
        if (!absl::SimpleAtoi(g->get<std::string>(), &gpus)) gpus = 0;
      } else if (g != alloc->end() && g->is_number_integer()) {
        gpus = g->get<int64_t>();
      }
    }
  }
  if (gpus <= 0) return reports;
  for (NodeConditionReport& r : reports) {
    if (r.type == kConditionGpu && r.reason == kReasonNotPresent) {
      r.status = "Unknown";
      r.reason = kReasonCannotSee;
      r.message = Cut(absl::StrCat("the node has ", gpus,
                                   " allocatable nvidia.com/gpu but the inspector sees none (no NVML or nvidia-smi "
                                   "in its container: the NVIDIA runtime or nodeInspector.runtimeClassName); ",
                                   r.message));
    }
  }
  return reports;
}

MergedConditions MergeConditions(const nlohmann::json& current, const std::vector<NodeConditionReport>& reports,
                                 absl::Time now, absl::Duration heartbeat) {
  MergedConditions out;
  out.conditions = current.is_array() ? current : nlohmann::json::array();
  const std::string now_text = TimeText(now);
  for (const NodeConditionReport& report : reports) {
    nlohmann::json* existing = nullptr;
    for (nlohmann::json& c : out.conditions) {
      if (c.is_object() && Str(c, "type") == report.type) existing = &c;
    }
    if (existing == nullptr) {
      out.conditions.push_back({{"type", report.type},
                                {"status", report.status},
                                {"reason", report.reason},
                                {"message", report.message},
                                {"lastHeartbeatTime", now_text},
                                {"lastTransitionTime", now_text}});
      out.changed = true;
      continue;
    }
    nlohmann::json& c = *existing;
    const bool transition = Str(c, "status") != report.status || Str(c, "reason") != report.reason;
    absl::Time beat;
    std::string error;
    const bool beat_due = !absl::ParseTime(absl::RFC3339_full, Str(c, "lastHeartbeatTime"), &beat, &error) ||
                          now - beat >= heartbeat;
    if (transition || beat_due || Str(c, "message") != report.message) out.changed = true;
    if (transition || Str(c, "lastTransitionTime").empty()) c["lastTransitionTime"] = now_text;
    c["status"] = report.status;
    c["reason"] = report.reason;
    c["message"] = report.message;
    c["lastHeartbeatTime"] = now_text;
  }
  return out;
}

}  // namespace peregrine
