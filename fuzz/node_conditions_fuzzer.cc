// Fuzzes the node inspector's channel on both sides with a Node's JSON as the API server
// could return it: NodeFindings (controller/kube/node_findings.h, what the controller
// reads) and MergeConditions (node_inspector/node_conditions.h, what the inspector writes
// back). Properties: every finding has a known kind and a non-OK status; the merge keeps
// every condition that is not one of the reported types, writes each reported type once,
// and merging the same reports again at the same time changes nothing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/kube/node_findings.h"
#include "fuzz/fuzz_check.h"
#include "node_inspector/node_conditions.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json node = nlohmann::json::parse(peregrine::fuzz::AsString(data, size), nullptr, false);
  if (node.is_discarded()) return 0;
  for (const peregrine::InspectionObservation& f : peregrine::NodeFindings(node)) {
    FUZZ_CHECK(!f.kind.empty());
    FUZZ_CHECK(f.status != peregrine::InspectionStatus::kOk && f.status != peregrine::InspectionStatus::kUnknown);
  }
  nlohmann::json current;
  if (node.is_object() && node.contains("status") && node["status"].is_object() &&
      node["status"].contains("conditions")) {
    current = node["status"]["conditions"];
  } else {
    current = node;
  }
  const std::vector<peregrine::NodeConditionReport> reports = {
      {peregrine::kConditionKernelXid, "True", peregrine::kReasonMachineFault, "Xid 79"},
      {peregrine::kConditionNic, "False", peregrine::kReasonNoProblem, ""}};
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  const peregrine::MergedConditions merged = peregrine::MergeConditions(current, reports, now, absl::Minutes(5));
  FUZZ_CHECK(merged.conditions.is_array());
  size_t others_before = 0, others_after = 0, ours = 0;
  auto is_ours = [](const nlohmann::json& c) {
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) return false;
    const std::string t = c["type"].get<std::string>();
    return t == peregrine::kConditionKernelXid || t == peregrine::kConditionNic;
  };
  if (current.is_array()) {
    for (const nlohmann::json& c : current) others_before += is_ours(c) ? 0 : 1;
  }
  for (const nlohmann::json& c : merged.conditions) {
    if (is_ours(c)) {
      ++ours;
    } else {
      ++others_after;
    }
  }
  FUZZ_CHECK(others_after == others_before);
  FUZZ_CHECK(ours >= reports.size());
  const peregrine::MergedConditions again = peregrine::MergeConditions(merged.conditions, reports, now, absl::Minutes(5));
  FUZZ_CHECK(!again.changed);
  FUZZ_CHECK(again.conditions == merged.conditions);
  return 0;
}
