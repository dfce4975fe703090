#include "agent/diagnostics/diagnostic_kinds.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "diagnosis/link_plan.h"

namespace peregrine {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 30;
constexpr int64_t kMaxMachines = 100000;
constexpr double kMaxGbps = 1e6;

// Assigns *out = *v or returns its status.
#define ASSIGN_OR_RETURN_PARAM(lhs, expr) \
  do {                                    \
    auto v_ = (expr);                     \
    if (!v_.ok()) return v_.status();     \
    lhs = *v_;                            \
  } while (0)

absl::StatusOr<MachineGroup> ParseGroup(const DiagnosticParams& p) {
  MachineGroup g;
  ASSIGN_OR_RETURN_PARAM(g.master_addr, p.RequiredString("master_addr"));
  ASSIGN_OR_RETURN_PARAM(g.master_port, p.RequiredInt("master_port", 1, 65535));
  ASSIGN_OR_RETURN_PARAM(g.machines, p.RequiredInt("machines", 1, kMaxMachines));
  ASSIGN_OR_RETURN_PARAM(g.machine_index, p.RequiredInt("machine_index", 0, kMaxMachines - 1));
  if (g.machine_index >= g.machines) {
    return p.Invalid("machine_index", absl::StrCat(g.machine_index, " is not below machines ", g.machines));
  }
  return g;
}

template <typename Options, absl::StatusOr<Options> (*Parse)(const DiagnosticParams&)>
absl::Status Validate(const DiagnosticParams& p) {
  return Parse(p).status();
}

absl::Duration Fixed60(const DiagnosticParams&) { return absl::Seconds(60); }
absl::Duration Fixed120(const DiagnosticParams&) { return absl::Seconds(120); }
absl::Duration Fixed600(const DiagnosticParams&) { return absl::Seconds(600); }
absl::Duration EudTimeout(const DiagnosticParams& p) {
  absl::StatusOr<EudOptions> o = ParseEudOptions(p);
  const int level = o.ok() ? o->level : 1;
  // dcgmi: level 1 takes about a minute, 2 a few minutes, 3 about half an hour, 4 hours.
  switch (level) {
    case 1: return absl::Minutes(2);
    case 2: return absl::Minutes(10);
    case 3: return absl::Minutes(45);
    default: return absl::Hours(3);
  }
}

constexpr DiagnosticKindInfo kKinds[] = {
    {"eud", EudTimeout, Validate<EudOptions, ParseEudOptions>},
    {"all_to_all", Fixed60, Validate<AllToAllOptions, ParseAllToAllOptions>},
    {"all_gather", Fixed120, Validate<AllGatherOptions, ParseAllGatherOptions>},
    {"alignment", Fixed120, Validate<AlignmentOptions, ParseAlignmentOptions>},
    {"replay", Fixed600, Validate<ReplayOptions, ParseReplayOptions>},
    {"gemm", Fixed120, Validate<GemmOptions, ParseGemmOptions>},
    {"p2p_rounds", Fixed120, Validate<P2pRoundsOptions, ParseP2pRoundsOptions>},
};

}  // namespace

absl::StatusOr<EudOptions> ParseEudOptions(const DiagnosticParams& p) {
  EudOptions o;
  ASSIGN_OR_RETURN_PARAM(o.level, p.Int("level", 1, 1, 4));
  return o;
}

absl::StatusOr<AllToAllOptions> ParseAllToAllOptions(const DiagnosticParams& p) {
  AllToAllOptions o;
  ASSIGN_OR_RETURN_PARAM(o.bytes, p.Int("bytes", o.bytes, 4, kMaxBytes));
  ASSIGN_OR_RETURN_PARAM(o.min_gbps, p.OptionalDouble("min_gbps", 0, kMaxGbps));
  return o;
}

absl::StatusOr<AllGatherOptions> ParseAllGatherOptions(const DiagnosticParams& p) {
  AllGatherOptions o;
  ASSIGN_OR_RETURN_PARAM(o.group, ParseGroup(p));
  ASSIGN_OR_RETURN_PARAM(o.bytes, p.Int("bytes", o.bytes, 4, kMaxBytes));
  ASSIGN_OR_RETURN_PARAM(o.min_gbps, p.OptionalDouble("min_gbps", 0, kMaxGbps));
  o.label = p.String("group");
  return o;
}

absl::StatusOr<AlignmentOptions> ParseAlignmentOptions(const DiagnosticParams& p) {
  AlignmentOptions o;
  int64_t seed = 0;
  ASSIGN_OR_RETURN_PARAM(seed, p.Int("seed", 1234, 0, int64_t{1} << 62));
  o.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN_PARAM(o.steps, p.Int("steps", 2, 1, 1000));
  return o;
}

absl::StatusOr<ReplayOptions> ParseReplayOptions(const DiagnosticParams& p) {
  ReplayOptions o;
  ASSIGN_OR_RETURN_PARAM(o.group, ParseGroup(p));
  ASSIGN_OR_RETURN_PARAM(o.tp, p.RequiredInt("tp", 1, 1 << 20));
  ASSIGN_OR_RETURN_PARAM(o.pp, p.RequiredInt("pp", 1, 1 << 20));
  ASSIGN_OR_RETURN_PARAM(o.dp, p.RequiredInt("dp", 1, 1 << 20));
  ASSIGN_OR_RETURN_PARAM(o.layers, p.Int("layers", 0, 0, 1 << 20));
  if (o.layers != 0 && o.layers % o.pp != 0) {
    return p.Invalid("layers", absl::StrCat(o.layers, " is not a multiple of pp ", o.pp));
  }
  ASSIGN_OR_RETURN_PARAM(o.steps, p.Int("steps", 2, 1, 100000));
  if (p.Has("seed")) {
    int64_t seed = 0;
    ASSIGN_OR_RETURN_PARAM(seed, p.Int("seed", 0, 0, 2147483647));
    o.seed = static_cast<uint64_t>(seed);
  }
  return o;
}

absl::StatusOr<GemmOptions> ParseGemmOptions(const DiagnosticParams& p) {
  GemmOptions o;
  const std::string dtype = p.String("dtype", "fp32");
  if (dtype == "fp32") {
    o.dtype = GemmDtype::kFp32;
  } else if (dtype == "fp16") {
    o.dtype = GemmDtype::kFp16;
  } else if (dtype == "bf16") {
    o.dtype = GemmDtype::kBf16;
  } else {
    return p.Invalid("dtype", absl::StrCat("expected fp16, bf16 or fp32, got \"", dtype, "\""));
  }
  ASSIGN_OR_RETURN_PARAM(o.size, p.Int("size", 1024, 16, 32768));
  ASSIGN_OR_RETURN_PARAM(o.iterations, p.Int("iterations", 0, 0, 1000000));
  std::optional<double> ratio;
  ASSIGN_OR_RETURN_PARAM(ratio, p.OptionalDouble("min_ratio", 0, 1));
  if (ratio) o.min_ratio = *ratio;
  return o;
}

absl::StatusOr<P2pRoundsOptions> ParseP2pRoundsOptions(const DiagnosticParams& p) {
  P2pRoundsOptions o;
  ASSIGN_OR_RETURN_PARAM(o.master_addr, p.RequiredString("master_addr"));
  ASSIGN_OR_RETURN_PARAM(o.master_port, p.RequiredInt("master_port", 1, 65535));
  ASSIGN_OR_RETURN_PARAM(o.ranks, p.RequiredInt("ranks", 2, 1 << 20));
  ASSIGN_OR_RETURN_PARAM(o.rank_base, p.RequiredInt("rank_base", 0, o.ranks - 1));
  ASSIGN_OR_RETURN_PARAM(o.bytes, p.Int("bytes", o.bytes, 4, kMaxBytes));
  ASSIGN_OR_RETURN_PARAM(o.rounds, p.RequiredString("rounds"));
  absl::StatusOr<ValidationRounds> plan = ParseLinkRoundsPlan(o.rounds, o.ranks);
  if (!plan.ok()) return p.Invalid("rounds", std::string(plan.status().message()));
  o.plan = std::move(*plan);
  return o;
}

const char* GemmDtypeName(GemmDtype dtype) {
  switch (dtype) {
    case GemmDtype::kFp16: return "fp16";
    case GemmDtype::kBf16: return "bf16";
    case GemmDtype::kFp32: return "fp32";
  }
  return "fp32";
}

const DiagnosticKindInfo* FindDiagnosticKind(const std::string& kind) {
  for (const DiagnosticKindInfo& k : kKinds) {
    if (kind == k.name) return &k;
  }
  return nullptr;
}

std::vector<std::string> DiagnosticKindNames() {
  std::vector<std::string> names;
  for (const DiagnosticKindInfo& k : kKinds) names.push_back(k.name);
  return names;
}

absl::Status ValidateDiagnostic(const std::string& kind, const DiagnosticParamMap& params) {
  const DiagnosticKindInfo* info = FindDiagnosticKind(kind);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown diagnostic kind \"", kind, "\" (known: ",
                                                   absl::StrJoin(DiagnosticKindNames(), ", "), ")"));
  }
  return info->validate(DiagnosticParams(kind, params));
}

absl::Duration DiagnosticTimeout(const std::string& kind, const DiagnosticParamMap& params, uint32_t timeout_ms) {
  if (timeout_ms > 0) return absl::Milliseconds(timeout_ms);
  const DiagnosticKindInfo* info = FindDiagnosticKind(kind);
  return info == nullptr ? absl::Minutes(1) : info->default_timeout(DiagnosticParams(kind, params));
}

}  // namespace peregrine
