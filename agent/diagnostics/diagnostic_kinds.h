// The diagnostic kinds an agent runs on command (RunDiagnostic), their params and defaults.
//
// One entry per kind: its name, its default timeout and a parser from the wire's string
// params to typed options. The agent validates a command with ValidateDiagnostic before
// starting anything (InvalidArgument naming the kind or the param); peregrine-diagnose
// parses the same options to run it. The params and results of each kind are documented
// in agent/diagnostics/README.md (the contract the controller relies on).
//
// Pure. Thread-safe (immutable table).
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/diagnostics/diagnostic_params.h"
#include "diagnosis/link_rounds.h"

namespace peregrine {

// ---- typed options of each kind ------------------------------------------------------------

struct EudOptions {
  int level = 1;  // dcgmi diag -r <level>
};

struct AllToAllOptions {
  int64_t bytes = 1 << 20;  // per peer
  std::optional<double> min_gbps;
};

// Where a group of machines meets: machine_index 0 hosts the rendezvous.
struct MachineGroup {
  std::string master_addr;
  int master_port = 0;
  int machines = 1;
  int machine_index = 0;
};

struct AllGatherOptions {
  MachineGroup group;
  int64_t bytes = 1 << 20;  // per rank
  std::optional<double> min_gbps;
  std::string label;  // param "group"
};

struct AlignmentOptions {
  uint64_t seed = 1234;
  int steps = 2;
};

struct ReplayOptions {
  MachineGroup group;
  int tp = 1, pp = 1, dp = 1;
  int layers = 0;  // 0: the job's own (one per pipeline stage)
  int steps = 2;
  std::optional<uint64_t> seed;
};

enum class GemmDtype { kFp16, kBf16, kFp32 };

struct GemmOptions {
  GemmDtype dtype = GemmDtype::kFp32;
  int size = 1024;
  int iterations = 0;  // 0: as many as fit in the tool's minimum timed duration
  double min_ratio = 0.9;
};

struct P2pRoundsOptions {
  std::string master_addr;
  int master_port = 0;
  int ranks = 2;      // communicator size
  int rank_base = 0;  // communicator rank of this machine's local GPU 0
  int64_t bytes = 1 << 20;
  std::string rounds;  // the plan as sent: "r0:s>d,s>d;r1:..."
  ValidationRounds plan;  // ParseLinkRoundsPlan (diagnosis/link_plan.h) of `rounds`
};

absl::StatusOr<EudOptions> ParseEudOptions(const DiagnosticParams& p);
absl::StatusOr<AllToAllOptions> ParseAllToAllOptions(const DiagnosticParams& p);
absl::StatusOr<AllGatherOptions> ParseAllGatherOptions(const DiagnosticParams& p);
absl::StatusOr<AlignmentOptions> ParseAlignmentOptions(const DiagnosticParams& p);
absl::StatusOr<ReplayOptions> ParseReplayOptions(const DiagnosticParams& p);
absl::StatusOr<GemmOptions> ParseGemmOptions(const DiagnosticParams& p);
absl::StatusOr<P2pRoundsOptions> ParseP2pRoundsOptions(const DiagnosticParams& p);


const char* GemmDtypeName(GemmDtype dtype);

// ---- the table -------------------------------------------------------------------------------

struct DiagnosticKindInfo {
  const char* name;
  // The timeout when the command gives none (timeout_ms 0); may depend on the params.
  absl::Duration (*default_timeout)(const DiagnosticParams& params);
  // OK when the params parse; InvalidArgument naming the kind and param otherwise.
  absl::Status (*validate)(const DiagnosticParams& params);
};

// The kind named `kind`, or nullptr.
const DiagnosticKindInfo* FindDiagnosticKind(const std::string& kind);
std::vector<std::string> DiagnosticKindNames();

// InvalidArgument "unknown diagnostic kind \"x\" (known: eud, ...)" or the param error.
absl::Status ValidateDiagnostic(const std::string& kind, const DiagnosticParamMap& params);

// timeout_ms when > 0, else the kind's default (1 minute for an unknown kind).
absl::Duration DiagnosticTimeout(const std::string& kind, const DiagnosticParamMap& params, uint32_t timeout_ms);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_KINDS_H_
