#include "diagnosis/dual_phase_replay.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "diagnosis/check.h"

namespace peregrine {
namespace {

struct Units {
  int dp_unit = 1;  // smallest DP size filling whole machines
  int w = 1;        // machines per unit
  int count = 1;    // U
};

Units UnitsOf(const ParallelLayout& layout) {
  const int g = layout.gpus_per_machine();
  const int tp_pp = layout.tensor() * layout.pipeline();
  Units u;
  u.dp_unit = g / std::gcd(g, tp_pp);
  u.w = tp_pp * u.dp_unit / g;
  PEREGRINE_CHECK(layout.data() % u.dp_unit == 0) << layout.DebugString();
  u.count = layout.data() / u.dp_unit;
  return u;
}

int VerticalSize(int m, int w) { return (m / w) * w; }

// Phase 1 groups: whole original DP units when every machine's ranks lie inside one
// horizontal group's DP range, else consecutive machines.
std::vector<std::vector<int>> HorizontalGroups(const ParallelLayout& layout, const Units& u,
                                               int n) {
  const int m = u.count / n;
  const int k = n * u.w;
  const int replicas_per_group = n * u.dp_unit;
  std::vector<std::vector<int>> groups(m);
  bool aligned = true;
  for (int machine = 0; machine < layout.machines() && aligned; ++machine) {
    int group = -1;
    for (int rank : layout.RanksOfMachine(machine)) {
      const int g = layout.Coordinates(rank).dp / replicas_per_group;
      if (group == -1) group = g;
      if (g != group) {
        aligned = false;
        break;
      }
    }
    if (aligned) groups[group].push_back(machine);
  }
  if (aligned) {
    for (const auto& g : groups) PEREGRINE_CHECK(static_cast<int>(g.size()) == k);
    return groups;
  }
  for (auto& g : groups) g.clear();
  for (int machine = 0; machine < layout.machines(); ++machine) {
    groups[machine / k].push_back(machine);
  }
  return groups;
}

}  // namespace

std::string DualPhaseReplayPlan::DebugString() const {
  std::string out = absl::StrFormat("n=%d m=%d machines_per_unit=%d layers=%d\n", n, m,
                                    machines_per_unit, layers);
  for (const auto& g : horizontal) {
    absl::StrAppend(&out, "H", g.index, " (dp=", g.replay_dp, "): ",
                    absl::StrJoin(g.machines, ","), "\n");
  }
  for (const auto& g : vertical) {
    absl::StrAppend(&out, "V", g.index, " (dp=", g.replay_dp, "): ",
                    absl::StrJoin(g.machines, ","), "\n");
  }
  return out;
}

absl::StatusOr<DualPhaseReplayPlan> PlanDualPhaseReplay(const ParallelLayout& layout,
                                                        const DualPhaseReplayOptions& options) {
  if (options.n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("n must be >= 0, got ", options.n));
  }
  if (options.layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers must be >= 0, got ", options.layers));
  }
  const Units u = UnitsOf(layout);
  int n = options.n;
  if (n > 0) {
    if (u.count % n != 0 || u.count / n < u.w) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "n=%d does not fit %s: n must divide the %d DP units of %d machines each and "
          "leave at least %d horizontal groups",
          n, layout.DebugString(), u.count, u.w, u.w));
    }
  } else {
    int best_score = -1;
    for (int cand = 1; cand <= u.count; ++cand) {
      if (u.count % cand != 0) continue;
      const int m = u.count / cand;
      if (m < u.w) continue;
      const int score = std::min(cand * u.w, VerticalSize(m, u.w));
      if (score >= best_score) {  // ties prefer the larger n
        best_score = score;
        n = cand;
      }
    }
    if (n == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "dual-phase replay cannot isolate one machine in %s: it has %d DP unit(s) of %d "
          "machines, and needs at least %d units so that every vertical group takes at most "
          "one machine from each horizontal group",
          layout.DebugString(), u.count, u.w, u.w));
    }
  }
  const int gpus_per_dp = layout.tensor() * layout.pipeline();
  const int g = layout.gpus_per_machine();
  DualPhaseReplayPlan plan;
  plan.n = n;
  plan.m = u.count / n;
  plan.machines_per_unit = u.w;
  plan.layers = options.layers > 0 ? options.layers : layout.pipeline();

  const std::vector<std::vector<int>> horizontal = HorizontalGroups(layout, u, n);
  for (int i = 0; i < static_cast<int>(horizontal.size()); ++i) {
    ReplayGroup group;
    group.index = i;
    group.machines = horizontal[i];
    group.replay_dp = static_cast<int>(group.machines.size()) * g / gpus_per_dp;
    plan.horizontal.push_back(std::move(group));
  }
  // Order machines by (position inside the horizontal group, horizontal group) and cut.
  const int k = n * u.w;
  const int v = VerticalSize(plan.m, u.w);
  std::vector<int> order;
  order.reserve(layout.machines());
  for (int pos = 0; pos < k; ++pos) {
    for (int h = 0; h < plan.m; ++h) order.push_back(horizontal[h][pos]);
  }
  for (int start = 0; start < static_cast<int>(order.size()); start += v) {
    ReplayGroup group;
    group.index = static_cast<int>(plan.vertical.size());
    const int end = std::min<int>(start + v, order.size());
    group.machines.assign(order.begin() + start, order.begin() + end);
    group.replay_dp = static_cast<int>(group.machines.size()) * g / gpus_per_dp;
    plan.vertical.push_back(std::move(group));
  }
  return plan;
}

namespace {

absl::StatusOr<const ReplayGroup*> SingleFailure(const std::vector<ReplayGroup>& groups,
                                                 absl::Span<const int> failed,
                                                 const char* phase) {
  std::vector<int> unique(failed.begin(), failed.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  for (int index : unique) {
    if (index < 0 || index >= static_cast<int>(groups.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s group %d does not exist (the plan has %d)", phase, index, groups.size()));
    }
  }
  if (unique.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no %s group failed: the fault did not reproduce in replay, so no machine can be "
        "located",
        phase));
  }
  if (unique.size() > 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%d %s groups failed (%s): more than one faulty machine, or a fault that is not a "
        "single machine's; the intersection is not unique",
        unique.size(), phase, absl::StrJoin(unique, ",")));
  }
  return &groups[unique[0]];
}

}  // namespace

absl::StatusOr<int> LocateFaultyMachine(const DualPhaseReplayPlan& plan,
                                        absl::Span<const int> failed_horizontal,
                                        absl::Span<const int> failed_vertical) {
  absl::StatusOr<const ReplayGroup*> h =
      SingleFailure(plan.horizontal, failed_horizontal, "horizontal");
  if (!h.ok()) return h.status();
  absl::StatusOr<const ReplayGroup*> v =
      SingleFailure(plan.vertical, failed_vertical, "vertical");
  if (!v.ok()) return v.status();
  std::vector<int> common;
  for (int machine : (*h)->machines) {
    if (std::find((*v)->machines.begin(), (*v)->machines.end(), machine) !=
        (*v)->machines.end()) {
      common.push_back(machine);
    }
  }
  if (common.size() != 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "horizontal group %d and vertical group %d share %d machines (%s), not one",
        (*h)->index, (*v)->index, common.size(), absl::StrJoin(common, ",")));
  }
  return common[0];
}

}  // namespace peregrine
