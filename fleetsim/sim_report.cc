// The table and the JSON of a run. Both derive the same three figures from each result:
// mean recovery (recovery_s / recoveries) and the ETTR and time-lost ratios to the first
// result; absent values print as "-" in the table and null in the JSON.
#include "fleetsim/sim_report.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace peregrine::fleetsim {
namespace {

constexpr double kSecondsPerHour = 3600;

std::optional<double> MeanRecovery(const SimResult& r) {
  if (r.recoveries <= 0) return std::nullopt;
  return r.recovery_s / static_cast<double>(r.recoveries);
}

std::optional<double> Ratio(double value, double reference) {
  if (reference == 0) return std::nullopt;
  return value / reference;
}

}  // namespace

std::string FormatResultsTable(const JobShape& shape, const std::vector<SimResult>& results) {
  std::string out = absl::StrFormat(
      "job: %d GPUs on %d machines (%d per machine), %.6g days, step %.6g s, seed %d\n",
      shape.gpus, shape.machines(), shape.gpus_per_machine, shape.days, shape.step_time_s,
      shape.seed);
  size_t width = 6;  // "policy"
  for (const SimResult& r : results) width = std::max(width, r.policy.size());
  const int w = static_cast<int>(width);
  absl::StrAppendFormat(&out,
                        "%-*s %7s %7s %8s | %7s %7s %7s %7s %7s %7s %7s | %6s %6s %8s %7s "
                        "%10s | %8s %8s | %5s %5s %5s %5s %5s\n",
                        w, "policy", "ETTR", "goodput", "lost h", "detect", "diagn",
                        "restart", "redo", "slow", "ckpt", "wait", "evict", "false",
                        "restarts", "exhaust", "mean rec s", "ETTR/1st", "lost/1st", "fs", "comp",
                        "comm", "S2", "S4");
  if (results.empty()) {
    out += "(no results)\n";
    return out;
  }
  const SimResult& first = results.front();
  for (const SimResult& r : results) {
    const auto hours = [](double s) { return absl::StrFormat("%.2f", s / kSecondsPerHour); };
    // Fail-slow counts exist only for the rows of the decision core.
    const auto core = [&r](int64_t v) { return r.decisions > 0 ? absl::StrCat(v) : std::string("-"); };
    const std::optional<double> mean = MeanRecovery(r);
    const std::optional<double> ettr_ratio = Ratio(r.ettr, first.ettr);
    const std::optional<double> lost_ratio = Ratio(r.lost.total(), first.lost.total());
    absl::StrAppendFormat(
        &out,
        "%-*s %7.4f %7.4f %8s | %7s %7s %7s %7s %7s %7s %7s | %6d %6d %8d %7d %10s | %8s "
        "%8s | %5s %5s %5s %5s %5s\n",
        w, r.policy, r.ettr, r.goodput, hours(r.lost.total()), hours(r.lost.detection_s),
        hours(r.lost.diagnosis_s), hours(r.lost.restart_s), hours(r.lost.redo_s),
        hours(r.lost.slowdown_s), hours(r.lost.checkpoint_s), hours(r.lost.waiting_s),
        r.evictions, r.false_evictions, r.restarts, r.standby_exhaustions,
        mean.has_value() ? absl::StrFormat("%.1f", *mean) : std::string("-"),
        ettr_ratio.has_value() ? absl::StrFormat("%.4f", *ettr_ratio) : std::string("-"),
        lost_ratio.has_value() ? absl::StrFormat("%.2f", *lost_ratio) : std::string("-"),
        core(r.failslow_findings), core(r.failslow_compute), core(r.failslow_communication),
        core(r.failslow_s2_plans), core(r.failslow_s4));
  }
  absl::StrAppendFormat(
      &out,
      "time lost in hours by cause; mean rec s: mean time from a fail-stop to training "
      "again; ETTR/1st and lost/1st: the row's ETTR and total time lost divided by the "
      "first row's (%s); fs: fail-slow findings the core opened, comp / comm: localized to a "
      "GPU / to a link, S2: micro-batch plans sent, S4: replacements decided (the simulated agents' "
      "diagnostics, the fail-slow validation's included, are an oracle of the fault list)\n",
      first.policy);
  return out;
}

std::string FormatResultsJson(const JobShape& shape, const CostModel& costs,
                              const std::vector<SimResult>& results) {
  using Json = nlohmann::ordered_json;
  const auto or_null = [](const std::optional<double>& v) {
    return v.has_value() ? Json(*v) : Json(nullptr);
  };
  Json job = {{"gpus", shape.gpus},
              {"gpus_per_machine", shape.gpus_per_machine},
              {"machines", shape.machines()},
              {"days", shape.days},
              {"step_time_s", shape.step_time_s},
              {"seed", shape.seed}};
  Json cost = {{"failstop_detection_s", costs.failstop_detection_s},
               {"diagnosis_s", costs.diagnosis_s},
               {"restart_s", costs.restart_s},
               {"pod_start_s", costs.pod_start_s},
               {"standby_swap_s", costs.standby_swap_s},
               {"requeue_s", costs.requeue_s},
               {"memory_checkpoint_save_s", costs.memory_checkpoint_save_s},
               {"memory_checkpoint_interval_s", costs.memory_checkpoint_interval_s},
               {"disk_checkpoint_save_s", costs.disk_checkpoint_save_s},
               {"disk_checkpoint_interval_s", costs.disk_checkpoint_interval_s},
               {"memory_restore_s", costs.memory_restore_s},
               {"disk_restore_s", costs.disk_restore_s},
               {"machine_return_s", costs.machine_return_s}};
  Json rows = Json::array();
  for (const SimResult& r : results) {
    const SimResult& first = results.front();
    Json lost = {{"detection_s", r.lost.detection_s},   {"diagnosis_s", r.lost.diagnosis_s},
                 {"restart_s", r.lost.restart_s},       {"redo_s", r.lost.redo_s},
                 {"slowdown_s", r.lost.slowdown_s},     {"checkpoint_s", r.lost.checkpoint_s},
                 {"waiting_s", r.lost.waiting_s},       {"total_s", r.lost.total()}};
    rows.push_back({{"policy", r.policy},
                    {"wall_s", r.wall_s},
                    {"kept_s", r.kept_s},
                    {"ettr", r.ettr},
                    {"goodput", r.goodput},
                    {"lost", std::move(lost)},
                    {"faults", r.faults},
                    {"fail_stops", r.fail_stops},
                    {"fail_slows", r.fail_slows},
                    {"evictions", r.evictions},
                    {"false_evictions", r.false_evictions},
                    {"restarts", r.restarts},
                    {"standby_exhaustions", r.standby_exhaustions},
                    {"recoveries", r.recoveries},
                    {"recovery_s", r.recovery_s},
                    {"mean_recovery_s", or_null(MeanRecovery(r))},
                    {"failslow", {{"findings", r.failslow_findings},
                                  {"localized", r.failslow_localized},
                                  {"compute", r.failslow_compute},
                                  {"communication", r.failslow_communication},
                                  {"confirmed", r.failslow_confirmed},
                                  {"s2_plans", r.failslow_s2_plans},
                                  {"s4_replacements", r.failslow_s4}}},
                    {"decisions", r.decisions},
                    {"sim_cpu_s", r.sim_cpu_s},
                    {"ettr_vs_first", or_null(Ratio(r.ettr, first.ettr))},
                    {"lost_vs_first", or_null(Ratio(r.lost.total(), first.lost.total()))}});
  }
  Json doc = {{"job", std::move(job)}, {"costs", std::move(cost)}, {"results", std::move(rows)}};
  return doc.dump(2) + "\n";
}

}  // namespace peregrine::fleetsim
