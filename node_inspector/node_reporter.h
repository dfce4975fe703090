// NodeReporter: writes the node inspector's conditions to its Node through the API server
// (the only I/O of the reporting): GET nodes/<name>, MergeConditions, and, when something
// changed, a JSON merge patch of nodes/<name>/status carrying the full conditions list and
// the resourceVersion it read, so a concurrent writer (the kubelet's heartbeat) is never
// overwritten: a conflict reads again and retries. A GPU report of NotPresent on a Node
// with allocatable GPUs is written as CannotSee (CheckGpuVisibility). RBAC: get on nodes,
// patch on nodes/status.
//
// Thread-compatible; the client must outlive the reporter.
#ifndef PEREGRINE_NODE_INSPECTOR_NODE_REPORTER_H_
#define PEREGRINE_NODE_INSPECTOR_NODE_REPORTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "controller/kube/rest_client.h"
#include "node_inspector/node_conditions.h"

namespace peregrine {

struct NodeReporterOptions {
  std::string node;                            // the Node's name (the pod's spec.nodeName)
  absl::Duration heartbeat = absl::Minutes(5);  // rewrite unchanged conditions this often
  int max_attempts = 5;                        // conflicts before giving up (kAborted)
};

class NodeReporter {
 public:
  NodeReporter(kube::RestClient* client, NodeReporterOptions options);
  // Writes `reports` at `now`. OK when written or nothing needed writing; the client's
  // error otherwise (kNotFound: no such Node; kPermissionDenied: RBAC; kAborted: still
  // conflicting after max_attempts).
  absl::Status Report(const std::vector<NodeConditionReport>& reports, absl::Time now);
  int writes() const { return writes_; }

 private:
  kube::RestClient* const client_;
  const NodeReporterOptions options_;
  int writes_ = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_NODE_INSPECTOR_NODE_REPORTER_H_
