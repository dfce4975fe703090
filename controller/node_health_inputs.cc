#include "controller/node_health_inputs.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/text_format.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {
namespace {

constexpr absl::string_view kResultPrefix = "peregrine-diagnose: result ";

}  // namespace

// The eviction reason is the incident's signal, a "; "-separated list whose machine items
// read "machine <id> (slot <n>, pod <pod>): <why>" (decide_triage.cc). The machine is
// over-evicted when its own item's <why> is the over-eviction marker; the item ends at the
// next "; " (the separator of SummarizeList) or at the end.
NodeInput QuarantineInput(absl::string_view machine_id, absl::string_view reason, int64_t now) {
  NodeInput in;
  in.kind = NodeInputKind::kFaultEviction;
  in.at = now;
  in.detail = std::string(reason);
  const std::string head = absl::StrCat("machine ", machine_id, " (slot ");
  for (size_t at = reason.find(head); at != absl::string_view::npos; at = reason.find(head, at + 1)) {
    if (at != 0 && reason.substr(at - 2, 2) != "; ") continue;  // "machine 10 (slot" is not machine 0's
    absl::string_view item = reason.substr(at);
    item = item.substr(0, item.find("; "));
    const size_t colon = item.find("): ");
    if (colon != absl::string_view::npos && item.substr(colon + 3) == kOverEvictionMarker) {
      in.kind = NodeInputKind::kOverEviction;
    }
    break;
  }
  return in;
}

std::vector<SweepCheck> SweepChecks(SweepKind kind) {
  return {SweepCheck{"gemm", {}}, SweepCheck{"eud", {{"level", kind == SweepKind::kFull ? "3" : "1"}}}};
}

absl::StatusOr<SweepCheckVerdict> JudgeDiagnoseOutput(absl::string_view output, int exit_code) {
  absl::string_view last;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipWhitespace())) last = line;
  if (exit_code != 0 || !absl::ConsumePrefix(&last, kResultPrefix)) {
    return absl::FailedPreconditionError(absl::StrCat("peregrine-diagnose exited ", exit_code, " without a result",
                                                      last.empty() ? "" : ": ", last.substr(0, 300)));
  }
  v1::DiagnosticResult result;
  if (!google::protobuf::TextFormat::ParseFromString(std::string(last), &result)) {
    return absl::InvalidArgumentError(
        absl::StrCat("peregrine-diagnose's result line does not parse: ", last.substr(0, 300)));
  }
  SweepCheckVerdict v;
  v.passed = result.passed();
  v.not_present = result.not_present();
  v.detail = result.detail().empty() ? absl::StrCat(result.kind(), result.passed() ? " passed" : " failed")
                                     : absl::StrCat(result.kind(), ": ", result.detail());
  return v;
}

}  // namespace peregrine
