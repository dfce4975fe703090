#include "controller/core/checkpoint_policy.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/fallback_placement.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {
namespace {

bool Failed(const std::vector<uint64_t>& failed_steps, uint64_t step) {
  return std::find(failed_steps.begin(), failed_steps.end(), step) != failed_steps.end();
}

bool Has(const std::vector<uint64_t>& steps, uint64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

// The newest step present in every slot's list (`list` picks it), excluding `failed`.
template <typename List>
std::optional<uint64_t> NewestCommon(const std::vector<const CheckpointReportObservation*>& slots, List list,
                                     const std::vector<uint64_t>& failed) {
  if (slots.empty()) return std::nullopt;
  for (const CheckpointReportObservation* r : slots) {
    if (r == nullptr) return std::nullopt;
  }
  std::optional<uint64_t> best;
  for (uint64_t step : list(*slots.front())) {
    if (step == 0 || Failed(failed, step) || (best && step <= *best)) continue;
    bool everywhere = true;
    for (const CheckpointReportObservation* r : slots) everywhere = everywhere && Has(list(*r), step);
    if (everywhere) best = step;
  }
  return best;
}

}  // namespace

SlotPlacement PlaceCheckpointBackups(const TrainingJobSpec& spec) {
  SlotPlacement out;
  auto layout = ParallelLayout::Create(spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data,
                                       spec.gpus_per_machine);
  if (!layout.ok()) {
    out.degraded_reason = absl::StrCat("placement degraded: no layout: ", layout.status().message());
    return out;
  }
  absl::StatusOr<CheckpointPlacement> placed = PlaceBackupsOrFewestShared(*layout, spec.checkpoint.backup_copies);
  if (!placed.ok()) {
    out.degraded_reason = absl::StrCat("placement degraded: ", placed.status().message());
    return out;
  }
  for (int m = 0; m < layout->machines(); ++m) {
    out.slots.push_back(CheckpointSlotPlacement{m, placed->placement.backups[m]});
  }
  out.degraded_reason = placed->degraded_reason;
  return out;
}

std::optional<uint64_t> CompleteStep(const std::vector<const CheckpointReportObservation*>& slots,
                                     int backup_copies, const std::vector<uint64_t>& failed_steps) {
  if (backup_copies == 0) {
    return NewestCommon(slots, [](const CheckpointReportObservation& r) -> const std::vector<uint64_t>& {
      return r.stored_steps;
    }, failed_steps);
  }
  return NewestCommon(slots, [](const CheckpointReportObservation& r) -> const std::vector<uint64_t>& {
    return r.backed_up_steps;
  }, failed_steps);
}

std::optional<uint64_t> PersistedStep(const std::vector<const CheckpointReportObservation*>& slots) {
  return NewestCommon(slots, [](const CheckpointReportObservation& r) -> const std::vector<uint64_t>& {
    return r.persisted_steps;
  }, {});
}

std::optional<RestoreFallback> FallbackStep(const std::vector<const CheckpointReportObservation*>& slots,
                                            const std::vector<const CheckpointReportObservation*>& holders,
                                            uint64_t failed_step, const std::vector<uint64_t>& failed_steps,
                                            uint64_t persisted_step, const std::string& persist_dir,
                                            const std::set<int>& corrupt_copy_slots) {
  // Every candidate step: any step some report names.
  std::set<uint64_t> candidates;
  for (const auto* list : {&slots, &holders}) {
    for (const CheckpointReportObservation* r : *list) {
      if (r == nullptr) continue;
      candidates.insert(r->stored_steps.begin(), r->stored_steps.end());
      for (const auto& [slot, step] : r->held) candidates.insert(step);
    }
  }
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const uint64_t step = *it;
    if (step == 0 || step >= failed_step || Failed(failed_steps, step)) continue;
    std::vector<std::string> where;
    bool all = !slots.empty();
    for (size_t slot = 0; slot < slots.size() && all; ++slot) {
      if (slots[slot] != nullptr && Has(slots[slot]->stored_steps, step)) {
        where.push_back(absl::StrFormat("slot %d: own copy", slot));
        continue;
      }
      if (corrupt_copy_slots.contains(static_cast<int>(slot))) {
        all = false;
        continue;
      }
      bool held = false;
      for (const CheckpointReportObservation* h : holders) {
        if (h == nullptr) continue;
        for (const auto& [held_slot, held_step] : h->held) {
          held = held || (held_slot == static_cast<int>(slot) && held_step == step);
        }
      }
      if (held) {
        where.push_back(absl::StrFormat("slot %d: a peer's copy", slot));
      } else {
        all = false;
      }
    }
    if (all) return RestoreFallback{step, false, absl::StrCat("in memory (", absl::StrJoin(where, ", "), ")")};
  }
  if (persisted_step > 0 && persisted_step < failed_step && !Failed(failed_steps, persisted_step)) {
    return RestoreFallback{persisted_step, true, absl::StrCat("persisted in ", persist_dir)};
  }
  return std::nullopt;
}

namespace {

// The fields every slot's plan shares (none of the placement's).
CheckpointPlanSpec BasePlan(const CheckpointSpec& c, const JobStatus& status) {
  CheckpointPlanSpec plan;
  plan.interval_steps = static_cast<uint32_t>(c.interval_steps);
  plan.restore_step = status.resume_step;
  plan.memory_limit_bytes = c.memory_limit_bytes;
  plan.backup_bandwidth_bytes_per_second = c.backup_bandwidth_bytes_per_second;
  plan.persist_every_steps = static_cast<uint32_t>(c.persist_every_steps);
  plan.persist_dir = c.persist_path;
  plan.committed_step = status.checkpoint.last_complete_step;
  return plan;
}

void SetBackups(CheckpointPlanSpec& plan, const std::vector<int>& holders) {
  plan.backup_to = holders;
  plan.backup_copies = static_cast<uint32_t>(holders.size());
  plan.restore_from = holders;
}

}  // namespace

CheckpointPlanSpec CheckpointPlanFor(const TrainingJobSpec& spec, const JobStatus& status, int slot) {
  const CheckpointSpec& c = spec.checkpoint;
  if (!c.enabled()) return CheckpointPlanSpec{};
  CheckpointPlanSpec plan = BasePlan(c, status);
  for (const CheckpointSlotPlacement& p : status.checkpoint.placement) {
    if (p.slot == slot) SetBackups(plan, p.holders);
    if (std::find(p.holders.begin(), p.holders.end(), slot) != p.holders.end()) plan.hold_for.push_back(p.slot);
  }
  return plan;
}

std::map<int, CheckpointPlanSpec> CheckpointPlansBySlot(const TrainingJobSpec& spec, const JobStatus& status) {
  std::map<int, CheckpointPlanSpec> plans;
  const CheckpointSpec& c = spec.checkpoint;
  if (!c.enabled()) return plans;
  const CheckpointPlanSpec base = BasePlan(c, status);
  auto plan = [&](int slot) -> CheckpointPlanSpec& { return plans.try_emplace(slot, base).first->second; };
  for (const SlotStatus& s : status.slots) plan(s.index);
  // In placement order, as CheckpointPlanFor pushes hold_for.
  for (const CheckpointSlotPlacement& p : status.checkpoint.placement) {
    SetBackups(plan(p.slot), p.holders);
    // A holder named twice in one entry holds for it once, as CheckpointPlanFor's scan.
    std::set<int> seen;
    for (int holder : p.holders) {
      if (seen.insert(holder).second) plan(holder).hold_for.push_back(p.slot);
    }
  }
  return plans;
}

}  // namespace peregrine
