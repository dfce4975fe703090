// The helper-side dispatch table: kind -> the function that runs it (in peregrine-diagnose).
//
// Each function runs its kind on this machine and returns the DiagnosticResult (passed or
// not: a failing machine is a result, not an error); InvalidArgument only for params that
// cannot be used on this machine (e.g. a replay layout that does not fit the group). Every
// function honours inv.deadline: what is still running then is killed and the result is
// passed=false with detail "timed out after N ms". Implementations: eud.cc,
// collective_check.cc (all_to_all, all_gather), alignment.cc, replay.cc, gemm.cc,
// p2p_rounds.cc.
//
// Thread-compatible: one diagnostic per helper process.
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_RUN_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_RUN_H_

#include "absl/status/statusor.h"
#include "agent/diagnostics/diagnostic_invocation.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

using DiagnosticResultOr = absl::StatusOr<v1::DiagnosticResult>;

DiagnosticResultOr RunEud(const DiagnosticInvocation& inv);
DiagnosticResultOr RunAllToAll(const DiagnosticInvocation& inv);
DiagnosticResultOr RunAllGather(const DiagnosticInvocation& inv);
DiagnosticResultOr RunAlignment(const DiagnosticInvocation& inv);
DiagnosticResultOr RunReplay(const DiagnosticInvocation& inv);
DiagnosticResultOr RunGemm(const DiagnosticInvocation& inv);
DiagnosticResultOr RunP2pRounds(const DiagnosticInvocation& inv);

// Looks the kind up and runs it; InvalidArgument for an unknown kind or malformed params.
DiagnosticResultOr RunDiagnosticKind(const DiagnosticInvocation& inv);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_RUN_H_
