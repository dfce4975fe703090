#include "agent/diagnostics/diagnostic_kinds_run.h"

#include "absl/strings/str_cat.h"
#include "agent/diagnostics/diagnostic_kinds.h"

namespace peregrine {
namespace {

struct KindRunner {
  const char* name;
  DiagnosticResultOr (*run)(const DiagnosticInvocation&);
};

constexpr KindRunner kRunners[] = {
    {"eud", RunEud},
    {"all_to_all", RunAllToAll},
    {"all_gather", RunAllGather},
    {"alignment", RunAlignment},
    {"replay", RunReplay},
    {"gemm", RunGemm},
    {"p2p_rounds", RunP2pRounds},
};

}  // namespace

DiagnosticResultOr RunDiagnosticKind(const DiagnosticInvocation& inv) {
  if (absl::Status s = ValidateDiagnostic(inv.kind, inv.params); !s.ok()) return s;
  for (const KindRunner& k : kRunners) {
    if (inv.kind == k.name) return k.run(inv);
  }
  return absl::UnimplementedError(absl::StrCat("diagnostic kind \"", inv.kind, "\" is not implemented in this build"));
}

}  // namespace peregrine
