// AttributeNodeFindings: a finding on node N reaches exactly the agents of the pods on N,
// and the decision policies treat it as the agent's own inspection.
#include "controller/core/node_attribution.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "controller/core/recovery_policy.h"

namespace peregrine {
namespace {

PodObservation PodOn(const std::string& name, const std::string& node, std::vector<InspectionObservation> findings) {
  PodObservation p;
  p.name = name;
  p.machine_id = node;
  p.running = true;
  p.node_findings = std::move(findings);
  return p;
}

AgentObservation AgentOf(const std::string& pod, const std::string& node) {
  AgentObservation a;
  a.pod = pod;
  a.machine_id = node;
  a.connected = true;
  return a;
}

const InspectionObservation kFatalXid{"xid", "node/PeregrineKernelXid", InspectionStatus::kFault,
                                      "node inspector: Xid 79", true, 100};
const InspectionObservation kNicFlap{"network", "node/PeregrineNIC", InspectionStatus::kWarning,
                                     "node inspector: ens1 flapped", false, 200};
const InspectionObservation kBlind{"gpu", "node/PeregrineGPU", InspectionStatus::kCannotSee,
                                   "node inspector: dcgm unreachable", false, 300};

TEST_CASE("node attribution: a finding on node N affects exactly the jobs with pods on N", "[unit]") {
  // Job A has pods on n1 and n2, job B on n2 and n3; n1 has a machine-fatal Xid. The
  // cluster shows each job only its own pods, each carrying its Node's findings.
  JobObservation a;
  a.pods = {PodOn("a-0", "n1", {kFatalXid}), PodOn("a-1", "n2", {})};
  a.agents = {AgentOf("a-0", "n1"), AgentOf("a-1", "n2")};
  JobObservation b;
  b.pods = {PodOn("b-0", "n2", {}), PodOn("b-1", "n3", {})};
  b.agents = {AgentOf("b-0", "n2"), AgentOf("b-1", "n3")};
  CHECK(AttributeNodeFindings(&a) == 1);
  CHECK(AttributeNodeFindings(&b) == 0);
  REQUIRE(MachineAttributedFault(a.agents[0]).has_value());
  CHECK(*MachineAttributedFault(a.agents[0]) == "xid/node/PeregrineKernelXid: node inspector: Xid 79");
  CHECK_FALSE(MachineAttributedFault(a.agents[1]).has_value());
  for (const AgentObservation& agent : b.agents) {
    CHECK_FALSE(MachineAttributedFault(agent).has_value());
    CHECK(agent.inspections.empty());
  }
}

TEST_CASE("node attribution: idempotent, network findings count once per transition, CANNOT_SEE only reported", "[unit]") {
  JobObservation obs;
  obs.pods = {PodOn("p-0", "n1", {kNicFlap, kBlind}), PodOn("p-1", "n2", {kFatalXid})};
  obs.agents = {AgentOf("p-0", "n1")};  // p-1's agent never registered: nothing to act on
  AttributeNodeFindings(&obs);
  AttributeNodeFindings(&obs);  // twice: no duplicates
  const AgentObservation& agent = obs.agents[0];
  CHECK(agent.inspections.size() == 2);
  REQUIRE(agent.alarms.size() == 1);  // the warning; CANNOT_SEE never alarms
  CHECK(agent.alarms[0].kind == "network");
  CHECK_FALSE(MachineAttributedFault(agent).has_value());
  std::vector<NetworkAlarmRecord> history;
  CHECK(RecordNetworkAlarms("n1", agent, 16, &history) == 1);
  // The next round shows the same condition (same lastTransitionTime): not a new alarm.
  JobObservation next = obs;
  next.agents = {AgentOf("p-0", "n1")};
  AttributeNodeFindings(&next);
  CHECK(RecordNetworkAlarms("n1", next.agents[0], 16, &history) == 0);
  // A new flap (a new transition): a new alarm.
  next.pods[0].node_findings[0].at = 900;
  next.agents = {AgentOf("p-0", "n1")};
  AttributeNodeFindings(&next);
  CHECK(RecordNetworkAlarms("n1", next.agents[0], 16, &history) == 1);
}

}  // namespace
}  // namespace peregrine
