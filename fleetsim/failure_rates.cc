// MTTF arithmetic and the operating-point checks. Sampling switches the fail-slow
// processes off (they do not interrupt the job) and counts fail-stops over the machines'
// up time: a machine in repair cannot fail (GenerateFaults drops those arrivals), and in a
// job its slot is filled by a replacement that can, so up time is the exposure.
#include "fleetsim/failure_rates.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::fleetsim {

double AnalyticMttfHours(double gpus, double rate_per_gpu_day) {
  const double per_day = gpus * rate_per_gpu_day;
  if (!(per_day > 0)) return std::numeric_limits<double>::infinity();
  return 24 / per_day;
}

double ModelMttfHours(const FaultModel& model, double gpus) {
  return AnalyticMttfHours(gpus, FailStopRatePerGpuDay(model));
}

SampledMttf SampleMttf(const FaultModel& model, int gpus, int gpus_per_machine, double days,
                       uint64_t seed) {
  SampledMttf out;
  if (gpus <= 0 || gpus_per_machine <= 0 || !(days > 0)) return out;
  FaultModel stops_only = model;
  stops_only.slow_compute.episodes_per_machine_day = 0;
  stops_only.slow_link.episodes_per_machine_day = 0;
  const int machines = (gpus + gpus_per_machine - 1) / gpus_per_machine;
  const std::vector<FaultEvent> events =
      GenerateFaults(stops_only, machines, gpus_per_machine, days, seed);
  const double horizon_ns = days * 86400e9;
  double down_ns = 0;
  for (const FaultEvent& e : events) {
    if (IsFailSlow(e.kind)) continue;
    ++out.fail_stops;
    down_ns += std::min(static_cast<double>(e.end_ns), horizon_ns) -
               static_cast<double>(e.start_ns);
  }
  out.up_gpu_days = (machines * horizon_ns - down_ns) / 86400e9 * gpus_per_machine;
  out.rate_per_gpu_day =
      out.up_gpu_days > 0 ? static_cast<double>(out.fail_stops) / out.up_gpu_days : 0;
  out.mttf_hours = AnalyticMttfHours(gpus, out.rate_per_gpu_day);
  return out;
}

std::vector<OperatingPoint> PublishedOperatingPoints() {
  return {
      {"Llama 3 405B pre-training",
       "Dubey et al., The Llama 3 Herd of Models, 2024, section 3.3.4, Table 5", 16384, 54, 419},
  };
}

std::vector<OperatingPointCheck> CheckOperatingPoints(const FaultModel& model, uint64_t seed) {
  std::vector<OperatingPointCheck> checks;
  for (const OperatingPoint& point : PublishedOperatingPoints()) {
    OperatingPointCheck c;
    c.point = point;
    c.model_mttf_hours = ModelMttfHours(model, static_cast<double>(point.gpus));
    c.expected_interruptions =
        FailStopRatePerGpuDay(model) * static_cast<double>(point.gpus) * point.days;
    c.sampled = SampleMttf(model, static_cast<int>(point.gpus), 8, point.days, seed);
    c.relative_error = std::abs(c.model_mttf_hours - point.mttf_hours()) / point.mttf_hours();
    checks.push_back(c);
  }
  return checks;
}

std::string FormatMttfTable(const FaultModel& model, uint64_t seed) {
  std::string out = absl::StrFormat(
      "fail-stop rate %.4g per GPU-day (gpu %.3g, memory %.3g, nic %.3g, host %.3g, "
      "software %.3g); seed %d\n\n",
      FailStopRatePerGpuDay(model), model.gpu_per_gpu_day, model.memory_per_gpu_day,
      model.nic_per_gpu_day, model.host_per_gpu_day, model.software_per_gpu_day, seed);
  absl::StrAppend(&out, "| GPUs | machines | MTTF analytic (h) | sampled days | fail-stops | "
                        "MTTF sampled (h) | sampled / analytic |\n",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const double days = 365;
  for (int gpus : {1000, 10000, 16384, 100000}) {
    const double analytic = ModelMttfHours(model, gpus);
    const SampledMttf s = SampleMttf(model, gpus, 8, days, seed);
    absl::StrAppend(&out, absl::StrFormat("| %d | %d | %.2f | %.0f | %d | %.2f | %.3f |\n", gpus,
                                          (gpus + 7) / 8, analytic, days, s.fail_stops,
                                          s.mttf_hours, s.mttf_hours / analytic));
  }
  absl::StrAppend(&out, "\n| operating point | GPUs | days | interruptions | published MTTF (h) | "
                        "model MTTF (h) | error | sampled interruptions |\n",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const OperatingPointCheck& c : CheckOperatingPoints(model, seed)) {
    absl::StrAppend(&out, absl::StrFormat("| %s | %d | %.0f | %d | %.2f | %.2f | %.1f%% | %d |\n",
                                          c.point.name, c.point.gpus, c.point.days,
                                          c.point.interruptions, c.point.mttf_hours(),
                                          c.model_mttf_hours, 100 * c.relative_error,
                                          c.sampled.fail_stops));
  }
  // ByteRobust's 9,600-GPU, three-month job: the model's prediction (the paper's counts
  // for that job were not available to check against).
  const double byterobust = FailStopRatePerGpuDay(model) * 9600 * 90;
  absl::StrAppend(&out, absl::StrFormat(
                            "\nprediction, 9600 GPUs x 90 days: %.0f fail-stops, MTTF %.2f h\n",
                            byterobust, ModelMttfHours(model, 9600)));
  const double norm = 1 + model.grey_fraction * (model.grey_multiplier - 1);
  absl::StrAppend(&out, absl::StrFormat(
                            "grey machines: %.1f%% of machines at %.2fx; removing them "
                            "multiplies the MTTF by %.2f (GUARD: 16.7 h / 6.6 h = %.2f)\n",
                            100 * model.grey_fraction, model.grey_multiplier, norm, 16.7 / 6.6));
  return out;
}

}  // namespace peregrine::fleetsim
