#include "fleetsim/cost_model.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::fleetsim {
namespace {

// A duration or interval: finite and >= 0 (or > 0 when `positive`).
absl::Status CheckSeconds(const char* field, double value, bool positive) {
  if (!std::isfinite(value) || value < 0 || (positive && value == 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: must be a finite number of seconds %s (got %g)", field, positive ? "> 0" : ">= 0", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobShape(const JobShape& shape) {
  if (shape.gpus_per_machine < 1 || shape.gpus_per_machine > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gpus_per_machine: must be in 1..64 (got %d)", shape.gpus_per_machine));
  }
  if (shape.gpus < shape.gpus_per_machine || shape.gpus > 10'000'000) {
    return absl::InvalidArgumentError(absl::StrFormat("gpus: must be in %d..10000000 (got %d)",
                                                      shape.gpus_per_machine, shape.gpus));
  }
  if (shape.gpus % shape.gpus_per_machine != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("gpus: %d is not a multiple of gpus_per_machine %d",
                                                      shape.gpus, shape.gpus_per_machine));
  }
  if (!std::isfinite(shape.days) || shape.days <= 0 || shape.days > 3650) {
    return absl::InvalidArgumentError(absl::StrFormat("days: must be in (0, 3650] (got %g)", shape.days));
  }
  if (!std::isfinite(shape.step_time_s) || shape.step_time_s < 0.001 || shape.step_time_s > 86400) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step_time_s: must be in [0.001, 86400] seconds (got %g)", shape.step_time_s));
  }
  return absl::OkStatus();
}

absl::Status ValidateCostModel(const CostModel& c) {
  const struct {
    const char* name;
    double value;
    bool positive;
  } fields[] = {
      {"failstop_detection_s", c.failstop_detection_s, false},
      {"diagnosis_s", c.diagnosis_s, false},
      {"restart_s", c.restart_s, false},
      {"pod_start_s", c.pod_start_s, false},
      {"standby_swap_s", c.standby_swap_s, false},
      {"requeue_s", c.requeue_s, false},
      {"memory_checkpoint_save_s", c.memory_checkpoint_save_s, false},
      {"memory_checkpoint_interval_s", c.memory_checkpoint_interval_s, true},
      {"disk_checkpoint_save_s", c.disk_checkpoint_save_s, false},
      {"disk_checkpoint_interval_s", c.disk_checkpoint_interval_s, true},
      {"memory_restore_s", c.memory_restore_s, false},
      {"disk_restore_s", c.disk_restore_s, false},
      {"machine_return_s", c.machine_return_s, false},
  };
  for (const auto& f : fields) {
    if (absl::Status s = CheckSeconds(f.name, f.value, f.positive); !s.ok()) return s;
  }
  if (c.memory_checkpoint_save_s >= c.memory_checkpoint_interval_s) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory_checkpoint_save_s: %g s is not shorter than memory_checkpoint_interval_s %g s",
        c.memory_checkpoint_save_s, c.memory_checkpoint_interval_s));
  }
  if (c.disk_checkpoint_save_s >= c.disk_checkpoint_interval_s) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "disk_checkpoint_save_s: %g s is not shorter than disk_checkpoint_interval_s %g s", c.disk_checkpoint_save_s,
        c.disk_checkpoint_interval_s));
  }
  return absl::OkStatus();
}

}  // namespace peregrine::fleetsim
