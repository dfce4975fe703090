// Attribution of node findings (the node inspector's, read from the Node's conditions by
// the cluster: PodObservation::node_findings) to a job's machines: each pod's findings
// join its agent's inspections, so the decision engine treats a finding on Node N exactly
// as the agent's own inspection on N would be treated (recovery_policy.h): a
// machine-attributed FAULT evicts the machine (and the eviction quarantines it through the
// node lifecycle), a network/rdma WARNING or FAULT counts as a network alarm (once per
// transition: its `at` is the condition's lastTransitionTime), CANNOT_SEE and ERROR change
// nothing but are reported. A finding affects exactly the jobs with a pod on its Node: a
// job sees only its own pods.
//
// Pure; thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_NODE_ATTRIBUTION_H_
#define PEREGRINE_CONTROLLER_CORE_NODE_ATTRIBUTION_H_

#include "controller/core/job_state.h"

namespace peregrine {

// Appends every pod's node_findings to the AgentObservation of the same pod: to
// `inspections`, and, for WARNING and FAULT, to `alarms`. A finding already there (same
// kind, component and at) is not added again, so applying it twice changes nothing. A
// pod whose agent never registered keeps its findings on the pod only (there is no
// machine of the job to act on yet). Returns how many findings were attributed.
int AttributeNodeFindings(JobObservation* observation);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_NODE_ATTRIBUTION_H_
