#include "client/microbatch_plan_format.h"

#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

// Parsing is strict on purpose: the file is written only by the agent, so anything else in
// it (a truncated write from another tool, a hand edit) is reported, never guessed at.
// Integers are plain decimal digits (no sign, no spaces); the counts list is bounded so a
// garbage file cannot make the reader allocate much.

namespace peregrine {
namespace {

constexpr size_t kMaxReplicas = 1 << 20;
constexpr const char* kKeys[] = {"version", "plan_id", "from_step", "global_micro_batches", "gradient_scale",
                                 "counts"};

bool ParseDigits(absl::string_view text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace

absl::Status ValidateMicroBatchPlan(const MicroBatchPlan& plan) {
  if (plan.plan_id == 0) return absl::InvalidArgumentError("plan_id: must be >= 1 for a plan with counts");
  if (plan.counts.empty()) return absl::InvalidArgumentError("counts: empty (one count per data-parallel replica)");
  if (plan.counts.size() > kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("counts: ", plan.counts.size(), " entries, at most ", kMaxReplicas));
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < plan.counts.size(); ++i) {
    if (plan.counts[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", i, "]: ", plan.counts[i], ", every replica needs at least 1 micro-batch"));
    }
    sum += plan.counts[i];
  }
  if (sum != plan.global_micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("global_micro_batches: ", plan.global_micro_batches,
                                                   " but the counts sum to ", sum));
  }
  if (!std::isfinite(plan.gradient_scale) || plan.gradient_scale <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient_scale: ", absl::StrFormat("%g", plan.gradient_scale), ", must be finite and > 0"));
  }
  return absl::OkStatus();
}

std::string FormatMicroBatchPlan(const MicroBatchPlan& plan) {
  return absl::StrCat("# peregrine micro-batch plan (written by the agent; see client/peregrine_client.h)\n",
                      "version=1\n", "plan_id=", plan.plan_id, "\n", "from_step=", plan.from_step, "\n",
                      "global_micro_batches=", plan.global_micro_batches, "\n",
                      "gradient_scale=", absl::StrFormat("%.17g", plan.gradient_scale), "\n",
                      "counts=", absl::StrJoin(plan.counts, ","), "\n");
}

absl::StatusOr<MicroBatchPlan> ParseMicroBatchPlan(std::string_view text) {
  std::map<std::string, std::pair<std::string, int>> values;  // key -> (value, line)
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": not key=value"));
    }
    const std::string key(line.substr(0, eq));
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": unknown key \"", key, "\""));
    if (values.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", key, " given twice"));
    }
    values[key] = {std::string(line.substr(eq + 1)), line_no};
  }
  for (const char* k : kKeys) {
    if (!values.contains(k)) return absl::InvalidArgumentError(absl::StrCat(k, ": missing"));
  }
  auto bad = [&](const std::string& key, absl::string_view want) {
    const auto& [value, line] = values[key];
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", key, ": \"", value.substr(0, 64),
                                                   value.size() > 64 ? "..." : "", "\" is not ", want));
  };
  uint64_t v = 0;
  if (!ParseDigits(values["version"].first, 1'000'000, &v)) return bad("version", "an integer");
  if (v != 1) return absl::InvalidArgumentError(absl::StrCat("version: ", v, ", this reader knows version 1"));
  MicroBatchPlan plan;
  if (!ParseDigits(values["plan_id"].first, std::numeric_limits<uint64_t>::max(), &plan.plan_id)) {
    return bad("plan_id", "an unsigned 64-bit integer");
  }
  if (!ParseDigits(values["from_step"].first, std::numeric_limits<uint64_t>::max(), &plan.from_step)) {
    return bad("from_step", "an unsigned 64-bit integer");
  }
  if (!ParseDigits(values["global_micro_batches"].first, std::numeric_limits<uint32_t>::max(), &v)) {
    return bad("global_micro_batches", "an unsigned 32-bit integer");
  }
  plan.global_micro_batches = static_cast<uint32_t>(v);
  const std::string& scale = values["gradient_scale"].first;
  if (scale.empty() || scale.find_first_of(" \t") != std::string::npos ||
      !absl::SimpleAtod(scale, &plan.gradient_scale)) {
    return bad("gradient_scale", "a number");
  }
  const std::string& counts = values["counts"].first;
  if (!counts.empty()) {
    size_t index = 0;
    for (absl::string_view c : absl::StrSplit(counts, ',')) {
      if (index >= kMaxReplicas) {
        return absl::InvalidArgumentError(absl::StrCat("counts: more than ", kMaxReplicas, " entries"));
      }
      if (!ParseDigits(c, std::numeric_limits<uint32_t>::max(), &v)) {
        return absl::InvalidArgumentError(absl::StrCat("line ", values["counts"].second, ": counts[", index, "]: \"",
                                                       c.substr(0, 32), "\" is not an unsigned 32-bit integer"));
      }
      plan.counts.push_back(static_cast<uint32_t>(v));
      ++index;
    }
  }
  if (absl::Status valid = ValidateMicroBatchPlan(plan); !valid.ok()) return valid;
  return plan;
}

absl::StatusOr<MicroBatchShare> ShareOf(const MicroBatchPlan& plan, uint32_t dp_rank) {
  if (dp_rank >= plan.counts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dp_rank ", dp_rank, ": the plan has counts for ",
                                                   plan.counts.size(), " data-parallel replicas"));
  }
  MicroBatchShare share;
  for (uint32_t r = 0; r < dp_rank; ++r) share.first += plan.counts[r];
  share.count = plan.counts[dp_rank];
  return share;
}

}  // namespace peregrine
