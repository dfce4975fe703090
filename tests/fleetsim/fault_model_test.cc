// FaultModel validation and GenerateFaults: order, determinism, the repair rule, grey
// machines and sampled rates against the analytic ones (fixed seeds, so deterministic).
#include "fleetsim/fault_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace peregrine::fleetsim {
namespace {

constexpr double kDayNs = 86400e9;

bool SameEvents(const std::vector<FaultEvent>& a, const std::vector<FaultEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].machine != b[i].machine || a[i].start_ns != b[i].start_ns ||
        a[i].end_ns != b[i].end_ns || a[i].kind != b[i].kind ||
        a[i].severity != b[i].severity) {
      return false;
    }
  }
  return true;
}

std::map<int, std::vector<FaultEvent>> ByMachine(const std::vector<FaultEvent>& events) {
  std::map<int, std::vector<FaultEvent>> out;
  for (const FaultEvent& e : events) out[e.machine].push_back(e);
  return out;
}

TEST_CASE("FaultKindName and IsFailSlow cover every kind", "[unit]") {
  CHECK(FaultKindName(FaultKind::kGpu) == "gpu");
  CHECK(FaultKindName(FaultKind::kMemory) == "memory");
  CHECK(FaultKindName(FaultKind::kNic) == "nic");
  CHECK(FaultKindName(FaultKind::kHost) == "host");
  CHECK(FaultKindName(FaultKind::kSoftware) == "software");
  CHECK(FaultKindName(FaultKind::kSlowCompute) == "slow");
  CHECK(FaultKindName(FaultKind::kSlowLink) == "slow-link");
  CHECK_FALSE(IsFailSlow(FaultKind::kGpu));
  CHECK_FALSE(IsFailSlow(FaultKind::kSoftware));
  CHECK(IsFailSlow(FaultKind::kSlowCompute));
  CHECK(IsFailSlow(FaultKind::kSlowLink));
}

TEST_CASE("Default fault model is valid and reproduces the Llama 3 interruption rate", "[unit]") {
  const FaultModel model;
  REQUIRE(ValidateFaultModel(model).ok());
  // 419 unexpected interruptions / (54 days x 16,384 GPUs).
  CHECK(FailStopRatePerGpuDay(model) == Approx(419.0 / (54.0 * 16384.0)).epsilon(1e-12));
}

TEST_CASE("ValidateFaultModel names the first field out of range", "[unit]") {
  struct Case {
    std::string field;
    void (*mutate)(FaultModel&);
  };
  const std::vector<Case> cases = {
      {"gpu_per_gpu_day", [](FaultModel& m) { m.gpu_per_gpu_day = -1e-4; }},
      {"memory_per_gpu_day", [](FaultModel& m) { m.memory_per_gpu_day = NAN; }},
      {"nic_per_gpu_day", [](FaultModel& m) { m.nic_per_gpu_day = INFINITY; }},
      {"host_per_gpu_day", [](FaultModel& m) { m.host_per_gpu_day = -1; }},
      {"software_per_gpu_day", [](FaultModel& m) { m.software_per_gpu_day = -0.5; }},
      {"grey_fraction", [](FaultModel& m) { m.grey_fraction = 1.5; }},
      {"grey_fraction", [](FaultModel& m) { m.grey_fraction = -0.1; }},
      {"grey_multiplier", [](FaultModel& m) { m.grey_multiplier = 0.5; }},
      {"slow_compute.episodes_per_machine_day",
       [](FaultModel& m) { m.slow_compute.episodes_per_machine_day = -1; }},
      {"slow_compute.duration_mean_s", [](FaultModel& m) { m.slow_compute.duration_mean_s = 0; }},
      {"slow_link.duration_max_s",
       [](FaultModel& m) { m.slow_link.duration_max_s = m.slow_link.duration_min_s / 2; }},
      {"slow_link.duration_min_s", [](FaultModel& m) { m.slow_link.duration_min_s = 0; }},
      {"slow_compute.severity_median", [](FaultModel& m) { m.slow_compute.severity_median = 0; }},
      {"slow_link.severity_median", [](FaultModel& m) { m.slow_link.severity_median = -0.2; }},
      {"slow_link.severity_max", [](FaultModel& m) { m.slow_link.severity_max = 0; }},
      {"slow_compute.severity_sigma", [](FaultModel& m) { m.slow_compute.severity_sigma = -1; }},
      {"gpu_repair_mean_s", [](FaultModel& m) { m.gpu_repair_mean_s = -60; }},
      {"software_repair_mean_s", [](FaultModel& m) { m.software_repair_mean_s = NAN; }},
  };
  for (const Case& c : cases) {
    FaultModel model;
    c.mutate(model);
    const absl::Status status = ValidateFaultModel(model);
    INFO(c.field << ": " << status);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(status.message()), Catch::Contains(c.field + " = "));
  }
}

TEST_CASE("ValidateFaultScope refuses bad machines, GPUs per machine, days and huge outputs", "[unit]") {
  const FaultModel model;
  CHECK(ValidateFaultScope(model, 1250, 8, 90).ok());
  CHECK_THAT(std::string(ValidateFaultScope(model, -1, 8, 1).message()), Catch::Contains("machines"));
  CHECK_THAT(std::string(ValidateFaultScope(model, 1, 0, 1).message()),
             Catch::Contains("gpus_per_machine"));
  CHECK_THAT(std::string(ValidateFaultScope(model, 1, 8, -1).message()), Catch::Contains("days"));
  CHECK_THAT(std::string(ValidateFaultScope(model, 1, 8, NAN).message()), Catch::Contains("days"));
  FaultModel heavy;
  heavy.slow_link.episodes_per_machine_day = 1e5;
  CHECK_THAT(std::string(ValidateFaultScope(heavy, 12500, 8, 30).message()),
             Catch::Contains("lower the rates"));
  CHECK(GenerateFaults(heavy, 12500, 8, 30, 1).empty());
  CHECK(GenerateFaults(model, -3, 8, 30, 1).empty());
}

TEST_CASE("GenerateFaults output is sorted, in range and deterministic for a seed", "[unit]") {
  const FaultModel model;
  const std::vector<FaultEvent> a = GenerateFaults(model, 500, 8, 30, 42);
  const std::vector<FaultEvent> b = GenerateFaults(model, 500, 8, 30, 42);
  const std::vector<FaultEvent> c = GenerateFaults(model, 500, 8, 30, 43);
  REQUIRE(a.size() > 1000);
  CHECK(SameEvents(a, b));
  CHECK_FALSE(SameEvents(a, c));
  for (size_t i = 0; i < a.size(); ++i) {
    const FaultEvent& e = a[i];
    INFO("event " << i);
    REQUIRE(e.machine >= 0);
    REQUIRE(e.machine < 500);
    REQUIRE(e.start_ns >= 0);
    REQUIRE(e.start_ns < static_cast<int64_t>(30 * kDayNs));
    REQUIRE(e.end_ns >= e.start_ns);
    if (IsFailSlow(e.kind)) {
      REQUIRE(e.severity > 0);
      REQUIRE(e.end_ns > e.start_ns);
    } else {
      REQUIRE(e.severity == 0);
    }
    if (i > 0) {
      const FaultEvent& p = a[i - 1];
      REQUIRE((p.start_ns < e.start_ns || (p.start_ns == e.start_ns && p.machine <= e.machine)));
    }
  }
}

TEST_CASE("A machine's faults do not depend on how many machines the job has", "[unit]") {
  FaultModel model;
  model.grey_fraction = 0;  // the grey set is drawn over all machines
  const std::vector<FaultEvent> small = GenerateFaults(model, 10, 8, 60, 7);
  std::vector<FaultEvent> large = GenerateFaults(model, 40, 8, 60, 7);
  large.erase(std::remove_if(large.begin(), large.end(),
                             [](const FaultEvent& e) { return e.machine >= 10; }),
              large.end());
  REQUIRE_FALSE(small.empty());
  CHECK(SameEvents(small, large));
}

TEST_CASE("No fault starts on a machine in repair and fail-slows never overlap a down machine", "[unit]") {
  FaultModel model;
  model.gpu_per_gpu_day *= 50;  // many faults and long repairs so the rule is exercised
  model.software_repair_mean_s = 600;
  const std::vector<FaultEvent> events = GenerateFaults(model, 200, 8, 60, 11);
  int64_t stops = 0;
  for (const auto& [machine, list] : ByMachine(events)) {
    std::vector<FaultEvent> down;
    for (const FaultEvent& e : list) {
      if (!IsFailSlow(e.kind)) down.push_back(e);
    }
    stops += static_cast<int64_t>(down.size());
    for (size_t i = 1; i < down.size(); ++i) {
      INFO("machine " << machine);
      REQUIRE(down[i].start_ns >= down[i - 1].end_ns);
    }
    for (const FaultEvent& e : list) {
      if (!IsFailSlow(e.kind)) continue;
      for (const FaultEvent& d : down) {
        if (d.end_ns == d.start_ns) continue;
        INFO("machine " << machine << " slow [" << e.start_ns << "," << e.end_ns << ") down ["
                        << d.start_ns << "," << d.end_ns << ")");
        REQUIRE((e.end_ns <= d.start_ns || e.start_ns >= d.end_ns));
      }
    }
    for (FaultKind kind : {FaultKind::kSlowCompute, FaultKind::kSlowLink}) {
      int64_t last_end = -1;
      for (const FaultEvent& e : list) {
        if (e.kind != kind) continue;
        REQUIRE(e.start_ns >= last_end);
        last_end = e.end_ns;
      }
    }
  }
  CHECK(stops > 500);
}

// Sampled fail-stop rate per GPU-day of up time against the model's rate: Poisson counts,
// tolerance of four standard deviations (fixed seed: the check is deterministic).
TEST_CASE("Sampled fail-stop rates match the analytic rates at 100k GPUs x 30 days", "[unit]") {
  // Without grey machines every machine has the same rate, so the count over the machines'
  // up time is Poisson with mean rate x up GPU-days. (Grey machines spend more time in
  // repair, which lowers the count a little: see the MTTF validation tests.)
  FaultModel model;
  model.grey_fraction = 0;
  const int machines = 12500;
  const int gpus = 8;
  const double days = 30;
  const std::vector<FaultEvent> events = GenerateFaults(model, machines, gpus, days, 2024);
  std::map<FaultKind, int64_t> counts;
  double down_ns = 0;
  const double horizon_ns = days * kDayNs;
  for (const FaultEvent& e : events) {
    ++counts[e.kind];
    if (!IsFailSlow(e.kind)) {
      down_ns += std::min<double>(static_cast<double>(e.end_ns), horizon_ns) -
                 static_cast<double>(e.start_ns);
    }
  }
  const double up_gpu_days = (machines * horizon_ns - down_ns) / kDayNs * gpus;
  const auto check_rate = [&](FaultKind kind, double rate) {
    const double expected = rate * up_gpu_days;
    INFO(FaultKindName(kind) << ": " << counts[kind] << " sampled, " << expected << " expected");
    CHECK(std::abs(static_cast<double>(counts[kind]) - expected) <=
          4 * std::sqrt(expected) + 1);
  };
  check_rate(FaultKind::kGpu, model.gpu_per_gpu_day);
  check_rate(FaultKind::kNic, model.nic_per_gpu_day);
  check_rate(FaultKind::kHost, model.host_per_gpu_day);
  check_rate(FaultKind::kSoftware, model.software_per_gpu_day);
  check_rate(FaultKind::kMemory, model.memory_per_gpu_day);
  int64_t total = 0;
  for (FaultKind k : {FaultKind::kGpu, FaultKind::kMemory, FaultKind::kNic, FaultKind::kHost,
                      FaultKind::kSoftware}) {
    total += counts[k];
  }
  const double expected_total = FailStopRatePerGpuDay(model) * up_gpu_days;
  CHECK(std::abs(static_cast<double>(total) - expected_total) <= 4 * std::sqrt(expected_total));
  // Fail-slows: episodes per machine-day (down time and the previous episode's length take
  // a little exposure away, so the tolerance is one-sided wider).
  const double slow_expected = model.slow_link.episodes_per_machine_day * machines * days;
  const double slow_count = static_cast<double>(counts[FaultKind::kSlowLink]);
  INFO("slow-link: " << slow_count << " sampled, " << slow_expected << " nominal");
  CHECK(slow_count <= slow_expected + 4 * std::sqrt(slow_expected));
  CHECK(slow_count >= slow_expected * 0.97);
}

TEST_CASE("Fail-slow durations and severities follow the configured distributions", "[unit]") {
  FaultModel model;
  model.gpu_per_gpu_day = model.memory_per_gpu_day = model.nic_per_gpu_day =
      model.host_per_gpu_day = model.software_per_gpu_day = 0;
  const std::vector<FaultEvent> events = GenerateFaults(model, 2000, 8, 30, 5);
  std::vector<double> compute_severity;
  double compute_duration_s = 0;
  double link_duration_s = 0;
  int64_t compute = 0;
  int64_t link = 0;
  for (const FaultEvent& e : events) {
    REQUIRE(IsFailSlow(e.kind));
    const double d = static_cast<double>(e.end_ns - e.start_ns) / 1e9;
    REQUIRE(d >= 30 - 1e-6);
    REQUIRE(d <= 36000 + 1e-6);
    if (e.kind == FaultKind::kSlowCompute) {
      ++compute;
      compute_duration_s += d;
      compute_severity.push_back(e.severity);
      REQUIRE(e.severity <= model.slow_compute.severity_max);
    } else {
      ++link;
      link_duration_s += d;
      REQUIRE(e.severity <= model.slow_link.severity_max);
    }
  }
  REQUIRE(compute > 5000);
  REQUIRE(link > 10000);
  // Clipping at 30 s raises the log-normal mean a little: within 5%.
  CHECK(compute_duration_s / compute == Approx(600).epsilon(0.05));
  CHECK(link_duration_s / link == Approx(1440).epsilon(0.05));
  std::nth_element(compute_severity.begin(),
                   compute_severity.begin() + compute_severity.size() / 2,
                   compute_severity.end());
  CHECK(compute_severity[compute_severity.size() / 2] == Approx(0.2).epsilon(0.03));
}

TEST_CASE("Grey machines are chosen from the seed and fail at the multiple of the others", "[unit]") {
  const FaultModel model;  // 5% grey at 31.6x
  const int machines = 12500;
  const int grey_count = 625;
  const std::vector<int> grey = GreyMachines(model, machines, 99);
  REQUIRE(grey.size() == grey_count);
  CHECK(std::is_sorted(grey.begin(), grey.end()));
  CHECK(std::adjacent_find(grey.begin(), grey.end()) == grey.end());
  CHECK(grey == GreyMachines(model, machines, 99));
  CHECK(grey != GreyMachines(model, machines, 100));
  FaultModel none = model;
  none.grey_fraction = 0;
  CHECK(GreyMachines(none, machines, 99).empty());

  const double days = 30;
  const std::vector<FaultEvent> events = GenerateFaults(model, machines, 8, days, 99);
  std::vector<bool> is_grey(machines, false);
  for (int m : grey) is_grey[static_cast<size_t>(m)] = true;
  // Per machine group: fail-stops over up time, compute fail-slows over the time the
  // machine is up and not already in a compute episode (the exposure of each process).
  struct Group {
    double stops = 0;
    double slows = 0;
    double links = 0;
    double up_s = 0;
    double slow_exposure_s = 0;
  };
  Group groups[2];
  const double horizon_s = days * 86400;
  for (int m = 0; m < machines; ++m) {
    groups[is_grey[static_cast<size_t>(m)] ? 1 : 0].up_s += horizon_s;
  }
  for (Group& g : groups) g.slow_exposure_s = g.up_s;
  for (const FaultEvent& e : events) {
    Group& g = groups[is_grey[static_cast<size_t>(e.machine)] ? 1 : 0];
    const double length_s = (std::min(static_cast<double>(e.end_ns), horizon_s * 1e9) -
                             static_cast<double>(e.start_ns)) / 1e9;
    if (!IsFailSlow(e.kind)) {
      g.stops += 1;
      g.up_s -= length_s;
      g.slow_exposure_s -= length_s;
    } else if (e.kind == FaultKind::kSlowCompute) {
      g.slows += 1;
      g.slow_exposure_s -= length_s;
    } else {
      g.links += 1;
    }
  }
  const double norm = 1 + model.grey_fraction * (model.grey_multiplier - 1);
  const double stop_per_machine_day = FailStopRatePerGpuDay(model) * 8;
  const double slow_per_machine_day = model.slow_compute.episodes_per_machine_day;
  const auto per_day = [](double count, double seconds) { return count / (seconds / 86400); };
  INFO("healthy stops " << groups[0].stops << " grey stops " << groups[1].stops);
  CHECK(per_day(groups[0].stops, groups[0].up_s) ==
        Approx(stop_per_machine_day / norm).epsilon(0.1));
  CHECK(per_day(groups[1].stops, groups[1].up_s) ==
        Approx(stop_per_machine_day * model.grey_multiplier / norm).epsilon(0.1));
  CHECK(per_day(groups[0].slows, groups[0].slow_exposure_s) ==
        Approx(slow_per_machine_day / norm).epsilon(0.04));
  CHECK(per_day(groups[1].slows, groups[1].slow_exposure_s) ==
        Approx(slow_per_machine_day * model.grey_multiplier / norm).epsilon(0.04));
  // Link fail-slows are not concentrated on grey machines.
  const double link_ratio =
      (groups[1].links / grey_count) / (groups[0].links / (machines - grey_count));
  CHECK(link_ratio == Approx(1).epsilon(0.15));
  // Taking the grey machines out multiplies the MTTF by GUARD's 16.7 h / 6.6 h.
  CHECK(norm == Approx(16.7 / 6.6).epsilon(1e-12));
}

TEST_CASE("Zero rates, zero machines or zero days give no faults", "[unit]") {
  FaultModel zero;
  zero.gpu_per_gpu_day = zero.memory_per_gpu_day = zero.nic_per_gpu_day =
      zero.host_per_gpu_day = zero.software_per_gpu_day = 0;
  zero.slow_compute.episodes_per_machine_day = zero.slow_link.episodes_per_machine_day = 0;
  CHECK(GenerateFaults(zero, 1000, 8, 30, 1).empty());
  CHECK(GenerateFaults(FaultModel{}, 0, 8, 30, 1).empty());
  CHECK(GenerateFaults(FaultModel{}, 1000, 8, 0, 1).empty());
}

TEST_CASE("GenerateFaults output for a fixed seed is pinned", "[unit]") {
  // Guards the cross-platform promise: a change of RNG, distribution code or seeding shows
  // here. Recorded from this implementation (glibc libm).
  const std::vector<FaultEvent> events = GenerateFaults(FaultModel{}, 16, 8, 10, 1);
  REQUIRE(events.size() >= 3);
  INFO("first: m" << events[0].machine << " " << events[0].start_ns << " "
                  << FaultKindName(events[0].kind));
  CHECK(events.size() == 95);
  CHECK(events[0].machine == 9);
  CHECK(events[0].start_ns == 5642193739519);
  CHECK(events[1].machine == 7);
  CHECK(events[1].start_ns == 6310577430212);
  CHECK(events.back().end_ns == 863780926196071);
}

}  // namespace
}  // namespace peregrine::fleetsim
