// Failure-rate validation: the mean time to failure (MTTF) of a job from per-GPU-day rates,
// analytic and sampled from GenerateFaults, and the published operating points the fault
// model is checked against (docs/simulation.md, "Validation: failure rates and MTTF").
//
// A job of G GPUs is interrupted by a fail-stop on any of its machines, so its MTTF is
// 1 / (G x rate per GPU-day). Pure arithmetic over GenerateFaults (deterministic for a
// seed). Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_FAILURE_RATES_H_
#define PEREGRINE_FLEETSIM_FAILURE_RATES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fleetsim/fault_model.h"

namespace peregrine::fleetsim {

// 24 / (gpus x rate_per_gpu_day) hours; +infinity when the product is not positive.
double AnalyticMttfHours(double gpus, double rate_per_gpu_day);

// AnalyticMttfHours(gpus, FailStopRatePerGpuDay(model)).
double ModelMttfHours(const FaultModel& model, double gpus);

// The MTTF measured from GenerateFaults samples (fail-slow processes switched off): the
// fail-stops of ceil(gpus / gpus_per_machine) machines over `days`, divided by their up
// time in GPU-days, gives the sampled rate; MTTF = 24 / (gpus x rate).
struct SampledMttf {
  int64_t fail_stops = 0;
  double up_gpu_days = 0;
  double rate_per_gpu_day = 0;
  double mttf_hours = 0;
};
SampledMttf SampleMttf(const FaultModel& model, int gpus, int gpus_per_machine, double days,
                       uint64_t seed);

// A published count of unexpected job interruptions on `gpus` GPUs over `days`.
struct OperatingPoint {
  std::string name;
  std::string source;  // paper, venue, year, section or table
  int64_t gpus = 0;
  double days = 0;
  int64_t interruptions = 0;
  double mttf_hours() const { return days * 24 / static_cast<double>(interruptions); }
};
std::vector<OperatingPoint> PublishedOperatingPoints();

// One operating point against the model: the expected interruptions (analytic), the
// sampled ones (GenerateFaults at the point's size and length), and the relative error of
// the model's MTTF against the published one.
struct OperatingPointCheck {
  OperatingPoint point;
  double model_mttf_hours = 0;
  double expected_interruptions = 0;
  SampledMttf sampled;
  double relative_error = 0;  // |model MTTF - published MTTF| / published MTTF
};
std::vector<OperatingPointCheck> CheckOperatingPoints(const FaultModel& model, uint64_t seed);

// The bench table of docs/simulation.md: MTTF at 1k, 10k, 16k and 100k GPUs (analytic and
// sampled over 365 days at 8 GPUs a machine), the published operating points, and the grey
// machines' share. Plain text, one row a line.
std::string FormatMttfTable(const FaultModel& model, uint64_t seed = 1);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_FAILURE_RATES_H_
