// What the two node health executors (controller/kube/node_health_controller.h and
// controller/local/local_node_health.h) share on top of the pure lifecycle
// (controller/core/node_lifecycle.h): the lifecycle input for a machine the decision engine
// hands to node health management (Cluster::QuarantineMachine), and the checks a sweep
// runs with peregrine-diagnose and how its output is judged.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_NODE_HEALTH_INPUTS_H_
#define PEREGRINE_CONTROLLER_NODE_HEALTH_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/core/node_lifecycle.h"

namespace peregrine {

// What the decision engine writes after a machine's name when the hang policy's stack
// aggregation evicted it only as a member of the over-evicted parallel group
// (decide_triage.cc: "machine <id> (slot <n>, pod <pod>): in the group stack aggregation
// over-evicts").
inline constexpr char kOverEvictionMarker[] = "in the group stack aggregation over-evicts";

// The lifecycle input for quarantining `machine_id` evicted with `reason` (the eviction's
// reason: its incident's signal) at `now`: kOverEviction when the reason names this
// machine with kOverEvictionMarker (evicted with its group, the culprit not localized
// within it: a short sweep, no failure counted), else kFaultEviction (the machine is the
// culprit). A machine the reason does not name (a long list summarised as "and N more")
// is taken as a culprit: the safe side (a full sweep).
NodeInput QuarantineInput(absl::string_view machine_id, absl::string_view reason, int64_t now);

// One peregrine-diagnose run of a sweep: its kind and params.
struct SweepCheck {
  std::string kind;                                       // "gemm", "eud"
  std::vector<std::pair<std::string, std::string>> params;  // --param KEY=VALUE
};
// A sweep's checks, in order: a full sweep runs the GEMM check on every GPU and the EUD at
// level 3 (dcgmi diag -r 3 where dcgmi is installed, else the stand-in self-test); a short
// one the GEMM check and the EUD at level 1.
std::vector<SweepCheck> SweepChecks(SweepKind kind);

// The verdict of one peregrine-diagnose run from its output (its last
// "peregrine-diagnose: result <DiagnosticResult, text format>" line) and exit code:
// passed (true/false) with a one-line detail, or an error naming what is wrong with the
// output (no result line, a result that does not parse, a non-zero exit).
struct SweepCheckVerdict {
  bool passed = false;
  bool not_present = false;  // neither the hardware nor the stand-in: passed, nothing checked
  std::string detail;
};
absl::StatusOr<SweepCheckVerdict> JudgeDiagnoseOutput(absl::string_view output, int exit_code);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_NODE_HEALTH_INPUTS_H_
