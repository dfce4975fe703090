#include "controller/core/node_attribution.h"

#include <algorithm>
#include <vector>

namespace peregrine {
namespace {

bool Same(const InspectionObservation& a, const InspectionObservation& b) {
  return a.kind == b.kind && a.component == b.component && a.at == b.at;
}

void AddOnce(std::vector<InspectionObservation>* to, const InspectionObservation& finding) {
  if (std::none_of(to->begin(), to->end(), [&](const InspectionObservation& o) { return Same(o, finding); })) {
    to->push_back(finding);
  }
}

}  // namespace

int AttributeNodeFindings(JobObservation* observation) {
  int attributed = 0;
  for (const PodObservation& pod : observation->pods) {
    if (pod.node_findings.empty() || pod.name.empty()) continue;
    for (AgentObservation& agent : observation->agents) {
      if (agent.pod != pod.name) continue;
      for (const InspectionObservation& f : pod.node_findings) {
        AddOnce(&agent.inspections, f);
        if (f.status == InspectionStatus::kWarning || f.status == InspectionStatus::kFault) {
          AddOnce(&agent.alarms, f);
        }
        ++attributed;
      }
    }
  }
  return attributed;
}

}  // namespace peregrine
