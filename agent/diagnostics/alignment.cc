// alignment: sim-trainer --reference-step on this machine's GPUs; the digest is compared
// across machines by the controller.
#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "base/free_port.h"

namespace peregrine {
namespace {

struct ReferenceLine {
  std::string digest;
  double loss = 0, grad_norm = 0;
  bool nan = false;
};

std::optional<ReferenceLine> ParseReferenceLine(const std::vector<std::string>& lines) {
  constexpr absl::string_view kPrefix = "[peregrine] reference-step ";
  for (const std::string& line : lines) {
    if (!absl::StartsWith(line, kPrefix)) continue;
    ReferenceLine r;
    bool have_digest = false;
    for (absl::string_view field : absl::StrSplit(line.substr(kPrefix.size()), ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (kv.first == "digest") {
        r.digest = kv.second;
        have_digest = kv.second.size() == 16;
      } else if (kv.first == "loss") {
        r.nan = r.nan || !absl::SimpleAtod(kv.second, &r.loss) || r.loss != r.loss;
      } else if (kv.first == "grad_norm") {
        r.nan = r.nan || !absl::SimpleAtod(kv.second, &r.grad_norm) || r.grad_norm != r.grad_norm;
      } else if (kv.first == "nan") {
        r.nan = r.nan || kv.second != "0";
      }
    }
    if (have_digest) return r;
  }
  return std::nullopt;
}

}  // namespace

DiagnosticResultOr RunAlignment(const DiagnosticInvocation& inv) {
  absl::StatusOr<AlignmentOptions> o = ParseAlignmentOptions(inv.Params());
  if (!o.ok()) return o.status();
  v1::DiagnosticResult result = NewResult(inv);
  absl::StatusOr<std::string> trainer = ToolPath(inv, "sim-trainer");
  if (!trainer.ok()) {
    if (!inv.InStandInCluster()) {
      result.set_not_present(true);
      result.set_detail("alignment: sim-trainer (the reference step) is not installed");
      return result;
    }
    result.set_passed(false);
    result.set_detail(absl::StrCat("alignment: ", trainer.status().message()));
    return result;
  }
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) return port.status();
  const int64_t left_ms = NcclTimeoutMs(inv, inv.clock->Now());
  absl::StatusOr<DiagnosticProcessesOutcome> run =
      RunRanks(inv, {0, inv.gpus, "127.0.0.1", *port}, left_ms,
               {*trainer, "--reference-step", "--seed", absl::StrCat(o->seed), "--steps", absl::StrCat(o->steps),
                "--init-timeout-s", absl::StrCat(std::max<int64_t>(1, left_ms / 1000))});
  if (!run.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("alignment: cannot start the reference step: ", run.status().message()));
    return result;
  }
  std::vector<std::string> problems;
  if (run->timed_out) problems.push_back(inv.TimedOutDetail());
  std::set<std::string> digests;
  for (const DiagnosticProcessOutcome& p : run->processes) {
    std::optional<ReferenceLine> line = ParseReferenceLine(p.lines);
    if (!p.ok() || !line) {
      if (!run->timed_out || !p.killed) problems.push_back(absl::StrCat("gpu", p.index, ": ", p.Describe()));
      result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + p.index));
      continue;
    }
    digests.insert(line->digest);
    if (p.index == 0) {
      (*result.mutable_figures())["loss"] = line->loss;
      (*result.mutable_figures())["grad_norm"] = line->grad_norm;
    }
    if (line->nan) problems.push_back(absl::StrCat("gpu", p.index, ": reference step produced NaN"));
  }
  (*result.mutable_figures())["gpus"] = inv.gpus;  // the digest depends on it (TP size)
  if (digests.size() > 1) problems.push_back("the machine's GPUs disagree on the reference step's digest");
  if (!digests.empty()) result.set_digest(*digests.begin());
  if (!problems.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("alignment: ", absl::StrJoin(problems, "; ")));
  }
  return result;
}

}  // namespace peregrine
