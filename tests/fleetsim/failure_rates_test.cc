// MTTF arithmetic, sampled MTTF against analytic, and the published operating points.
#include "fleetsim/failure_rates.h"

#include <cmath>
#include <string>

#include <catch2/catch.hpp>

namespace peregrine::fleetsim {
namespace {

TEST_CASE("Analytic MTTF is 1 / (GPUs x rate) and reproduces Llama 3's 3.1 hours", "[unit]") {
  CHECK(AnalyticMttfHours(1000, 1e-3) == Approx(24.0));
  CHECK(std::isinf(AnalyticMttfHours(1000, 0)));
  CHECK(std::isinf(AnalyticMttfHours(0, 1e-3)));
  const FaultModel model;
  // 54 days x 24 h / 419 interruptions = 3.093 h on 16,384 GPUs.
  CHECK(ModelMttfHours(model, 16384) == Approx(54.0 * 24 / 419).epsilon(1e-9));
  CHECK(ModelMttfHours(model, 16384) == Approx(3.09).margin(0.01));
  // MTTF scales as 1 / GPUs.
  CHECK(ModelMttfHours(model, 1000) / ModelMttfHours(model, 100000) == Approx(100));
}

TEST_CASE("Sampled MTTF matches the analytic MTTF within Poisson noise without grey machines", "[unit]") {
  FaultModel model;
  model.grey_fraction = 0;
  for (int gpus : {1000, 16384, 100000}) {
    const SampledMttf s = SampleMttf(model, gpus, 8, 365, 3);
    const double expected = FailStopRatePerGpuDay(model) * s.up_gpu_days;
    INFO(gpus << " GPUs: " << s.fail_stops << " fail-stops, " << expected << " expected");
    CHECK(std::abs(static_cast<double>(s.fail_stops) - expected) <= 4 * std::sqrt(expected));
    CHECK(s.mttf_hours == Approx(ModelMttfHours(model, gpus)).epsilon(4 / std::sqrt(expected)));
  }
}

TEST_CASE("Sampled MTTF with grey machines is up to 20% above the analytic MTTF", "[unit]") {
  // Grey machines fail at 12.5x the fleet average and spend about 9% of their time in
  // repair, when they cannot fail; they also make the count over-dispersed (a few machines
  // carry most failures). The sampled MTTF is therefore above the analytic one, by about
  // 5% at 100k GPUs and by up to 13% at 10k GPUs for the seeds in docs/simulation.md.
  const FaultModel model;
  for (int gpus : {10000, 16384, 100000}) {
    for (uint64_t seed : {1, 4}) {
      const SampledMttf s = SampleMttf(model, gpus, 8, 365, seed);
      const double ratio = s.mttf_hours / ModelMttfHours(model, gpus);
      INFO(gpus << " GPUs, seed " << seed << ": sampled / analytic " << ratio);
      CHECK(ratio >= 0.98);
      CHECK(ratio <= 1.20);
    }
  }
}

TEST_CASE("The default model reproduces the published operating points", "[unit]") {
  const FaultModel model;
  const auto checks = CheckOperatingPoints(model, 5);
  REQUIRE_FALSE(checks.empty());
  for (const OperatingPointCheck& c : checks) {
    INFO(c.point.name << ": model " << c.model_mttf_hours << " h, published "
                      << c.point.mttf_hours() << " h, sampled " << c.sampled.fail_stops);
    CHECK(c.relative_error < 0.01);
    CHECK(c.expected_interruptions == Approx(static_cast<double>(c.point.interruptions)).epsilon(0.01));
    const double n = static_cast<double>(c.point.interruptions);
    CHECK(std::abs(static_cast<double>(c.sampled.fail_stops) - n) <= 0.1 * n + 4 * std::sqrt(n));
  }
  // A model with half the GPU fault rate does not reproduce them.
  FaultModel off = model;
  off.gpu_per_gpu_day /= 2;
  CHECK(CheckOperatingPoints(off, 5)[0].relative_error > 0.3);
}

TEST_CASE("FormatMttfTable prints the MTTF rows, the operating points and the grey share", "[unit]") {
  const std::string table = FormatMttfTable(FaultModel{}, 1);
  CHECK_THAT(table, Catch::Contains("| 1000 | 125 | 50.68 |"));
  CHECK_THAT(table, Catch::Contains("| 16384 | 2048 | 3.09 |"));
  CHECK_THAT(table, Catch::Contains("| 100000 | 12500 | 0.51 |"));
  CHECK_THAT(table, Catch::Contains("| Llama 3 405B pre-training | 16384 | 54 | 419 | 3.09 | 3.09 | 0.0% |"));
  CHECK_THAT(table, Catch::Contains("9600 GPUs x 90 days"));
  CHECK_THAT(table, Catch::Contains("multiplies the MTTF by 2.53"));
}

}  // namespace
}  // namespace peregrine::fleetsim
