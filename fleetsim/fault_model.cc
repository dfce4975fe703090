// Fault generation. Each machine draws from its own mt19937_64 stream, seeded from the job
// seed and the machine number through SplitMix64, so a machine's faults do not depend on
// how many machines the job has or on the order of generation. Every distribution is our
// own code over the raw 64-bit words (the std:: distributions differ across standard
// libraries):
//   - uniform in (0, 1]: the top 53 bits, plus one ulp, times 2^-53;
//   - exponential: -log(u) * mean (inter-arrival gaps of a Poisson process and repairs);
//   - normal: Marsaglia's polar method (log and sqrt only);
//   - log-normal: exp(mu + sigma * normal), mu chosen for the stated mean or median.
// Poisson processes are sampled by drawing gaps, never by stepping through time, so the
// cost is proportional to the number of events (plus one draw per machine and process).
#include "fleetsim/fault_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace peregrine::fleetsim {
namespace {

constexpr double kNsPerSecond = 1e9;
constexpr double kSecondsPerDay = 86400.0;
constexpr double kMaxDays = 36500;             // a century of simulated time
constexpr double kMaxRepairOrDurationS = 365 * kSecondsPerDay;
constexpr double kMaxRatePerDay = 1e6;
constexpr double kMaxExpectedEvents = 5e7;     // about 1.6 GB of FaultEvents: refuse more

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  // Uniform in (0, 1].
  double OpenZero() { return (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53; }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  double Exponential(double mean) { return mean <= 0 ? 0 : -std::log(OpenZero()) * mean; }
  double Normal() {
    for (;;) {
      const double v1 = 2 * Unit() - 1;
      const double v2 = 2 * Unit() - 1;
      const double s = v1 * v1 + v2 * v2;
      if (s > 0 && s < 1) return v1 * std::sqrt(-2 * std::log(s) / s);
    }
  }
  double LogNormal(double mu, double sigma) {
    return sigma == 0 ? std::exp(mu) : std::exp(mu + sigma * Normal());
  }
  // Uniform integer in [0, n), n > 0, without modulo bias.
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      const uint64_t x = gen_();
      if (x < limit) return x % n;
    }
  }

 private:
  std::mt19937_64 gen_;
};

absl::Status OutOfRange(absl::string_view field, double value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("fault model: ", field, " = ", value, " is out of range (want ", want, ")"));
}

absl::Status CheckNonNegative(absl::string_view field, double value, double max) {
  if (!std::isfinite(value) || value < 0 || value > max) {
    return OutOfRange(field, value, absl::StrCat("finite, in [0, ", max, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFailSlow(absl::string_view prefix, const FailSlowModel& m) {
  const auto name = [&](absl::string_view field) { return absl::StrCat(prefix, ".", field); };
  if (absl::Status s = CheckNonNegative(name("episodes_per_machine_day"),
                                        m.episodes_per_machine_day, kMaxRatePerDay);
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(m.duration_mean_s) || m.duration_mean_s <= 0 ||
      m.duration_mean_s > kMaxRepairOrDurationS) {
    return OutOfRange(name("duration_mean_s"), m.duration_mean_s, "> 0 and <= 365 days");
  }
  if (absl::Status s = CheckNonNegative(name("duration_sigma"), m.duration_sigma, 10); !s.ok()) {
    return s;
  }
  if (!std::isfinite(m.duration_min_s) || m.duration_min_s <= 0) {
    return OutOfRange(name("duration_min_s"), m.duration_min_s, "> 0");
  }
  if (!std::isfinite(m.duration_max_s) || m.duration_max_s < m.duration_min_s ||
      m.duration_max_s > kMaxRepairOrDurationS) {
    return OutOfRange(name("duration_max_s"), m.duration_max_s,
                      ">= duration_min_s and <= 365 days");
  }
  if (!std::isfinite(m.severity_median) || m.severity_median <= 0) {
    return OutOfRange(name("severity_median"), m.severity_median, "> 0");
  }
  if (absl::Status s = CheckNonNegative(name("severity_sigma"), m.severity_sigma, 10); !s.ok()) {
    return s;
  }
  if (!std::isfinite(m.severity_max) || m.severity_max <= 0 || m.severity_max > 1000) {
    return OutOfRange(name("severity_max"), m.severity_max, "> 0 and <= 1000");
  }
  return absl::OkStatus();
}

// Per-machine rate factors: grey machines get multiplier / norm, the others 1 / norm, where
// norm makes the fleet average equal to the model's rates.
struct RateFactors {
  double healthy = 1;
  double grey = 1;
};

RateFactors Factors(const FaultModel& model, int machines, int grey_count) {
  if (machines <= 0 || grey_count <= 0) return {};
  const double f = static_cast<double>(grey_count) / machines;
  const double norm = 1 + f * (model.grey_multiplier - 1);
  return {1 / norm, model.grey_multiplier / norm};
}

int64_t ToNs(double seconds) { return static_cast<int64_t>(std::llround(seconds * kNsPerSecond)); }

struct StopClass {
  FaultKind kind;
  double rate_per_gpu_day;
  double repair_mean_s;
};

void GenerateMachine(const FaultModel& model, int machine, double factor, int gpus_per_machine,
                     int64_t horizon_ns, uint64_t seed, std::vector<FaultEvent>& out) {
  Rng rng(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(machine) + 1)));
  const StopClass classes[] = {
      {FaultKind::kGpu, model.gpu_per_gpu_day, model.gpu_repair_mean_s},
      {FaultKind::kMemory, model.memory_per_gpu_day, model.memory_repair_mean_s},
      {FaultKind::kNic, model.nic_per_gpu_day, model.nic_repair_mean_s},
      {FaultKind::kHost, model.host_per_gpu_day, model.host_repair_mean_s},
      {FaultKind::kSoftware, model.software_per_gpu_day, model.software_repair_mean_s},
  };
  const double per_gpu = FailStopRatePerGpuDay(model);
  const double stop_rate_per_s = per_gpu * gpus_per_machine * factor / kSecondsPerDay;

  // Fail-stops: one merged process; after a fault the clock resumes at the repair's end
  // (arrivals during a repair are dropped; by memorylessness the next gap starts there).
  const size_t first = out.size();
  if (stop_rate_per_s > 0) {
    int64_t t = 0;
    for (;;) {
      t += ToNs(rng.Exponential(1 / stop_rate_per_s));
      if (t >= horizon_ns) break;
      double pick = rng.Unit() * per_gpu;
      const StopClass* chosen = &classes[4];
      for (const StopClass& c : classes) {
        if (c.rate_per_gpu_day > 0 && pick < c.rate_per_gpu_day) {
          chosen = &c;
          break;
        }
        pick -= c.rate_per_gpu_day;
      }
      // Rounding can leave `pick` past the last class with a zero rate: take the last
      // class with a positive rate instead.
      if (chosen->rate_per_gpu_day <= 0) {
        for (const StopClass& c : classes) {
          if (c.rate_per_gpu_day > 0) chosen = &c;
        }
      }
      const int64_t end = t + ToNs(rng.Exponential(chosen->repair_mean_s));
      out.push_back({machine, t, end, chosen->kind, 0});
      t = end;
    }
  }
  // Down intervals of this machine (software faults with no repair leave it up).
  std::vector<std::pair<int64_t, int64_t>> down;
  for (size_t i = first; i < out.size(); ++i) {
    if (out[i].end_ns > out[i].start_ns) down.emplace_back(out[i].start_ns, out[i].end_ns);
  }

  const auto slow = [&](const FailSlowModel& m, FaultKind kind, double rate_factor) {
    const double rate_per_s = m.episodes_per_machine_day * rate_factor / kSecondsPerDay;
    if (rate_per_s <= 0) return;
    const double duration_mu =
        std::log(m.duration_mean_s) - m.duration_sigma * m.duration_sigma / 2;
    const double severity_mu = std::log(m.severity_median);
    size_t next_down = 0;  // first down interval that ends after t
    int64_t t = 0;
    for (;;) {
      t += ToNs(rng.Exponential(1 / rate_per_s));
      if (t >= horizon_ns) break;
      const double duration_s = std::clamp(rng.LogNormal(duration_mu, m.duration_sigma),
                                           m.duration_min_s, m.duration_max_s);
      const double severity =
          std::min(rng.LogNormal(severity_mu, m.severity_sigma), m.severity_max);
      while (next_down < down.size() && down[next_down].second <= t) ++next_down;
      if (next_down < down.size() && down[next_down].first <= t) {
        continue;  // the machine is down: dropped
      }
      int64_t end = t + std::max<int64_t>(ToNs(duration_s), 1);
      if (next_down < down.size() && down[next_down].first < end) end = down[next_down].first;
      out.push_back({machine, t, end, kind, severity});
      t = end;  // episodes of one kind do not overlap
    }
  };
  slow(model.slow_compute, FaultKind::kSlowCompute, factor);
  slow(model.slow_link, FaultKind::kSlowLink, 1.0);
}

}  // namespace

bool IsFailSlow(FaultKind kind) {
  return kind == FaultKind::kSlowCompute || kind == FaultKind::kSlowLink;
}

std::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kGpu:
      return "gpu";
    case FaultKind::kMemory:
      return "memory";
    case FaultKind::kNic:
      return "nic";
    case FaultKind::kHost:
      return "host";
    case FaultKind::kSoftware:
      return "software";
    case FaultKind::kSlowCompute:
      return "slow";
    case FaultKind::kSlowLink:
      return "slow-link";
  }
  return "unknown";
}

double FailStopRatePerGpuDay(const FaultModel& model) {
  return model.gpu_per_gpu_day + model.memory_per_gpu_day + model.nic_per_gpu_day +
         model.host_per_gpu_day + model.software_per_gpu_day;
}

absl::Status ValidateFaultModel(const FaultModel& model) {
  const std::pair<absl::string_view, double> rates[] = {
      {"gpu_per_gpu_day", model.gpu_per_gpu_day},
      {"memory_per_gpu_day", model.memory_per_gpu_day},
      {"nic_per_gpu_day", model.nic_per_gpu_day},
      {"host_per_gpu_day", model.host_per_gpu_day},
      {"software_per_gpu_day", model.software_per_gpu_day},
  };
  for (const auto& [name, value] : rates) {
    if (absl::Status s = CheckNonNegative(name, value, kMaxRatePerDay); !s.ok()) return s;
  }
  if (!std::isfinite(model.grey_fraction) || model.grey_fraction < 0 ||
      model.grey_fraction > 1) {
    return OutOfRange("grey_fraction", model.grey_fraction, "in [0, 1]");
  }
  if (!std::isfinite(model.grey_multiplier) || model.grey_multiplier < 1 ||
      model.grey_multiplier > 1e6) {
    return OutOfRange("grey_multiplier", model.grey_multiplier, ">= 1 and <= 1e6");
  }
  if (absl::Status s = CheckFailSlow("slow_compute", model.slow_compute); !s.ok()) return s;
  if (absl::Status s = CheckFailSlow("slow_link", model.slow_link); !s.ok()) return s;
  const std::pair<absl::string_view, double> repairs[] = {
      {"gpu_repair_mean_s", model.gpu_repair_mean_s},
      {"memory_repair_mean_s", model.memory_repair_mean_s},
      {"nic_repair_mean_s", model.nic_repair_mean_s},
      {"host_repair_mean_s", model.host_repair_mean_s},
      {"software_repair_mean_s", model.software_repair_mean_s},
  };
  for (const auto& [name, value] : repairs) {
    if (absl::Status s = CheckNonNegative(name, value, kMaxRepairOrDurationS); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFaultScope(const FaultModel& model, int machines, int gpus_per_machine,
                                double days) {
  if (absl::Status s = ValidateFaultModel(model); !s.ok()) return s;
  if (machines < 0) {
    return absl::InvalidArgumentError(absl::StrCat("machines = ", machines, " is negative"));
  }
  if (gpus_per_machine < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus_per_machine = ", gpus_per_machine, " must be >= 1"));
  }
  if (!std::isfinite(days) || days < 0 || days > kMaxDays) {
    return absl::InvalidArgumentError(
        absl::StrCat("days = ", days, " is out of range (want [0, ", kMaxDays, "])"));
  }
  // The grey factors keep the fleet average, so this is the expected count.
  const double per_machine_day = FailStopRatePerGpuDay(model) * gpus_per_machine +
                                 model.slow_compute.episodes_per_machine_day +
                                 model.slow_link.episodes_per_machine_day;
  const double expected = per_machine_day * machines * days;
  if (expected > kMaxExpectedEvents) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the fault model would generate about ", expected, " events over ", machines,
        " machines and ", days, " days (limit ", kMaxExpectedEvents, "): lower the rates"));
  }
  return absl::OkStatus();
}

void SortFaults(std::vector<FaultEvent>& faults) {
  std::sort(faults.begin(), faults.end(), [](const FaultEvent& a, const FaultEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.machine != b.machine) return a.machine < b.machine;
    if (a.kind != b.kind) return a.kind < b.kind;
    return a.end_ns < b.end_ns;
  });
}

std::vector<int> GreyMachines(const FaultModel& model, int machines, uint64_t seed) {
  if (machines <= 0 || !(model.grey_fraction > 0) || model.grey_fraction > 1) return {};
  const int count = static_cast<int>(
      std::min<long long>(machines, std::llround(model.grey_fraction * machines)));
  std::vector<int> all(static_cast<size_t>(machines));
  for (int i = 0; i < machines; ++i) all[static_cast<size_t>(i)] = i;
  Rng rng(SplitMix64(seed ^ 0x6772657920736574ULL));  // "grey set"
  for (int i = 0; i < count; ++i) {  // partial Fisher-Yates
    const uint64_t j = static_cast<uint64_t>(i) + rng.Below(static_cast<uint64_t>(machines - i));
    std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(j)]);
  }
  all.resize(static_cast<size_t>(count));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<FaultEvent> GenerateFaults(const FaultModel& model, int machines,
                                       int gpus_per_machine, double days, uint64_t seed) {
  if (!ValidateFaultScope(model, machines, gpus_per_machine, days).ok()) return {};
  const std::vector<int> grey = GreyMachines(model, machines, seed);
  std::vector<bool> is_grey(static_cast<size_t>(machines), false);
  for (int m : grey) is_grey[static_cast<size_t>(m)] = true;
  const RateFactors factors = Factors(model, machines, static_cast<int>(grey.size()));
  const int64_t horizon_ns = ToNs(days * kSecondsPerDay);

  std::vector<FaultEvent> out;
  const double expected = (FailStopRatePerGpuDay(model) * gpus_per_machine +
                           model.slow_compute.episodes_per_machine_day +
                           model.slow_link.episodes_per_machine_day) *
                          machines * days;
  out.reserve(static_cast<size_t>(expected * 1.1) + 16);
  for (int m = 0; m < machines; ++m) {
    GenerateMachine(model, m, is_grey[static_cast<size_t>(m)] ? factors.grey : factors.healthy,
                    gpus_per_machine, horizon_ns, seed, out);
  }
  SortFaults(out);
  return out;
}

}  // namespace peregrine::fleetsim
