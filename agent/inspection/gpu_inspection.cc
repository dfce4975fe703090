#include "agent/inspection/gpu_inspection.h"

#include <dlfcn.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace peregrine {
namespace {

absl::Status FieldError(int line_no, absl::string_view field, absl::string_view value,
                        absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "nvidia-smi line %d, field %s: %s (\"%s\")", line_no, field, why, value.substr(0, 80)));
}

bool IsMissing(absl::string_view v) {
  return v.empty() || v == "N/A" || v == "[N/A]" || v == "[Not Supported]" ||
         v == "[Unknown Error]" || v == "Not Supported" || v == "[Insufficient Permissions]";
}

template <typename T>
absl::Status ParseInt(int line_no, absl::string_view field, absl::string_view v,
                      std::optional<T>* out) {
  if (IsMissing(v)) return absl::OkStatus();
  T value;
  if (!absl::SimpleAtoi(v, &value)) return FieldError(line_no, field, v, "not an integer");
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseHexOrInt(int line_no, absl::string_view field, absl::string_view v,
                           std::optional<uint64_t>* out) {
  if (IsMissing(v)) return absl::OkStatus();
  absl::string_view s = v;
  uint64_t value = 0;
  if (absl::ConsumePrefix(&s, "0x") || absl::ConsumePrefix(&s, "0X")) {
    if (s.empty() || !absl::SimpleHexAtoi(s, &value)) {
      return FieldError(line_no, field, v, "not a hex bit mask");
    }
  } else if (!absl::SimpleAtoi(s, &value)) {
    return FieldError(line_no, field, v, "not a bit mask");
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseYesNo(int line_no, absl::string_view field, absl::string_view v,
                        std::optional<bool>* out) {
  if (IsMissing(v)) return absl::OkStatus();
  if (v == "Yes" || v == "1") {
    *out = true;
  } else if (v == "No" || v == "0") {
    *out = false;
  } else {
    return FieldError(line_no, field, v, "expected Yes/No");
  }
  return absl::OkStatus();
}

constexpr int kFieldCount = 14;

}  // namespace

std::string ThrottleReasonNames(uint64_t reasons) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {kThrottleGpuIdle, "gpu_idle"},         {kThrottleApplicationsClocks, "applications_clocks"},
      {kThrottleSwPowerCap, "sw_power_cap"},  {kThrottleHwSlowdown, "hw_slowdown"},
      {kThrottleSyncBoost, "sync_boost"},     {kThrottleSwThermal, "sw_thermal"},
      {kThrottleHwThermal, "hw_thermal"},     {kThrottleHwPowerBrake, "hw_power_brake"},
      {kThrottleDisplayClocks, "display_clocks"}};
  if (reasons == 0) return "none";
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) names.push_back(name);
  }
  if (reasons & ~known) names.push_back(absl::StrFormat("0x%x", reasons & ~known));
  return absl::StrJoin(names, "|");
}

absl::StatusOr<GpuReport> ParseNvidiaSmiCsv(absl::string_view text) {
  static const char* kFields[kFieldCount] = {
      "index", "uuid", "pci.bus_id", "temperature.gpu", "clocks.sm", "clocks.mem",
      "clocks_throttle_reasons.active", "power.draw", "utilization.gpu", "utilization.memory",
      "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
      "remapped_rows.pending", "remapped_rows.failure"};
  GpuReport report;
  report.source = "nvidia-smi";
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    absl::string_view lost = line;
    if (absl::ConsumePrefix(&lost, "Unable to determine the device handle for GPU")) {
      lost = absl::StripAsciiWhitespace(lost);
      // "0000:3B:00.0: Unknown Error" -> the bus id before ": ".
      report.lost.push_back(std::string(lost.substr(0, lost.find(": "))));
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (static_cast<int>(f.size()) != kFieldCount) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "nvidia-smi line %d: %d fields, expected %d (%s): \"%s\"", line_no, f.size(),
          kFieldCount, kNvidiaSmiQuery, line.substr(0, 120)));
    }
    for (auto& v : f) v = absl::StripAsciiWhitespace(v);
    GpuSample s;
    if (!absl::SimpleAtoi(f[0], &s.index) || s.index < 0) {
      return FieldError(line_no, kFields[0], f[0], "not a GPU index");
    }
    s.uuid = std::string(f[1]);
    s.pci_bus_id = std::string(f[2]);
    absl::Status st;
    if (!(st = ParseInt(line_no, kFields[3], f[3], &s.temperature_c)).ok()) return st;
    if (!(st = ParseInt(line_no, kFields[4], f[4], &s.sm_clock_mhz)).ok()) return st;
    if (!(st = ParseInt(line_no, kFields[5], f[5], &s.mem_clock_mhz)).ok()) return st;
    if (!(st = ParseHexOrInt(line_no, kFields[6], f[6], &s.throttle_reasons)).ok()) return st;
    if (!IsMissing(f[7])) {
      double w;
      if (!absl::SimpleAtod(f[7], &w) || w < 0) return FieldError(line_no, kFields[7], f[7], "not watts");
      s.power_w = w;
    }
    if (!(st = ParseInt(line_no, kFields[8], f[8], &s.utilization_gpu_pct)).ok()) return st;
    if (!(st = ParseInt(line_no, kFields[9], f[9], &s.utilization_mem_pct)).ok()) return st;
    if (!(st = ParseInt(line_no, kFields[10], f[10], &s.ecc_uncorrected_volatile)).ok()) return st;
    if (!(st = ParseInt(line_no, kFields[11], f[11], &s.ecc_corrected_volatile)).ok()) return st;
    if (!(st = ParseYesNo(line_no, kFields[12], f[12], &s.remap_pending)).ok()) return st;
    if (!(st = ParseYesNo(line_no, kFields[13], f[13], &s.remap_failure)).ok()) return st;
    report.gpus.push_back(std::move(s));
  }
  return report;
}

absl::StatusOr<DcgmHealth> ParseDcgmHealth(absl::string_view text) {
  DcgmHealth health;
  DcgmIncident* current = nullptr;
  int line_no = 0;
  bool have_overall = false;
  auto valid = [](absl::string_view h) {
    return h == "Healthy" || h == "Warning" || h == "Failure";
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::StartsWith(line, "|")) continue;  // borders, blank lines
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    // "| left | right |" splits into "", left, right, "".
    if (cells.size() < 4) continue;  // title row "| Health Monitor Report |"
    absl::string_view left = absl::StripAsciiWhitespace(cells[1]);
    absl::string_view right = absl::StripAsciiWhitespace(cells[2]);
    absl::string_view word = right.substr(0, right.find(' '));
    if (absl::StartsWith(left, "Overall Health")) {
      if (!valid(word)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dcgmi line %d: unknown overall health \"%s\"", line_no, right));
      }
      health.overall = std::string(word);
      have_overall = true;
      current = nullptr;
      continue;
    }
    absl::string_view gpu = left;
    if (absl::ConsumePrefix(&gpu, "GPU ID:") || absl::ConsumePrefix(&gpu, "GPU")) {
      if (!valid(word)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "dcgmi line %d: unknown GPU health \"%s\"", line_no, right));
      }
      health.incidents.push_back(
          {std::string(absl::StripAsciiWhitespace(gpu)), std::string(word), ""});
      current = &health.incidents.back();
      continue;
    }
    if (left.empty() && current != nullptr && !right.empty()) {
      if (!current->message.empty()) current->message += " ";
      absl::StrAppend(&current->message, right);
    }
  }
  if (!have_overall) {
    return absl::InvalidArgumentError(
        "dcgmi health output has no 'Overall Health' row (not `dcgmi health -c` output?)");
  }
  return health;
}

std::vector<InspectionResult> EvaluateGpus(const GpuReport& report, int expected_gpus,
                                           const GpuThresholds& t, absl::Time now) {
  std::vector<InspectionResult> out;
  for (const GpuSample& g : report.gpus) {
    InspectionResult r;
    r.kind = "gpu";
    r.component = absl::StrCat("gpu", g.index);
    r.observed_at = now;
    r.details["source"] = report.source;
    if (!g.uuid.empty()) r.details["uuid"] = g.uuid;
    if (!g.pci_bus_id.empty()) r.details["pci_bus_id"] = g.pci_bus_id;
    if (g.temperature_c) r.details["temperature_c"] = absl::StrCat(*g.temperature_c);
    if (g.sm_clock_mhz) r.details["sm_clock_mhz"] = absl::StrCat(*g.sm_clock_mhz);
    if (g.mem_clock_mhz) r.details["mem_clock_mhz"] = absl::StrCat(*g.mem_clock_mhz);
    if (g.throttle_reasons) r.details["throttle_reasons"] = ThrottleReasonNames(*g.throttle_reasons);
    if (g.power_w) r.details["power_w"] = absl::StrFormat("%.2f", *g.power_w);
    if (g.utilization_gpu_pct) r.details["utilization_gpu_pct"] = absl::StrCat(*g.utilization_gpu_pct);
    if (g.utilization_mem_pct) r.details["utilization_mem_pct"] = absl::StrCat(*g.utilization_mem_pct);
    if (g.ecc_uncorrected_volatile) r.details["ecc_uncorrected_volatile"] = absl::StrCat(*g.ecc_uncorrected_volatile);
    if (g.ecc_corrected_volatile) r.details["ecc_corrected_volatile"] = absl::StrCat(*g.ecc_corrected_volatile);
    if (g.remap_pending) r.details["remap_pending"] = *g.remap_pending ? "yes" : "no";
    if (g.remap_failure) r.details["remap_failure"] = *g.remap_failure ? "yes" : "no";

    std::vector<std::string> faults, warnings;
    if (g.remap_failure.value_or(false)) faults.push_back("row remapping failed");
    if (g.remap_pending.value_or(false)) faults.push_back("row remapping pending (GPU reset needed)");
    if (g.ecc_uncorrected_volatile && *g.ecc_uncorrected_volatile >= t.ecc_uncorrected_fault) {
      faults.push_back(absl::StrCat(*g.ecc_uncorrected_volatile, " uncorrected ECC errors"));
    }
    if (g.temperature_c && *g.temperature_c >= t.temperature_warn_c) {
      warnings.push_back(absl::StrCat("temperature ", *g.temperature_c, " C >= ",
                                      t.temperature_warn_c, " C"));
    }
    if (g.throttle_reasons && (*g.throttle_reasons & t.warn_throttle_mask) != 0) {
      warnings.push_back(absl::StrCat("clocks throttled: ",
                                      ThrottleReasonNames(*g.throttle_reasons & t.warn_throttle_mask)));
    }
    if (!faults.empty()) {
      r.status = InspectionOutcome::kFault;
      r.machine_attributed = true;
      faults.insert(faults.end(), warnings.begin(), warnings.end());
      r.summary = absl::StrJoin(faults, "; ");
    } else if (!warnings.empty()) {
      r.status = InspectionOutcome::kWarning;
      r.summary = absl::StrJoin(warnings, "; ");
    } else {
      r.status = InspectionOutcome::kOk;
      r.summary = "healthy";
    }
    out.push_back(std::move(r));
  }
  for (const std::string& lost : report.lost) {
    InspectionResult r;
    r.kind = "gpu";
    r.component = lost;
    r.observed_at = now;
    r.status = InspectionOutcome::kFault;
    r.machine_attributed = true;
    r.summary = absl::StrCat("GPU ", lost, " is unavailable (lost by the driver)");
    r.details["source"] = report.source;
    out.push_back(std::move(r));
  }
  const int visible = static_cast<int>(report.gpus.size());
  if (expected_gpus > 0 && visible < expected_gpus) {
    InspectionResult r;
    r.kind = "gpu";
    r.component = "gpus";
    r.observed_at = now;
    r.status = InspectionOutcome::kFault;
    r.machine_attributed = true;
    r.summary = absl::StrFormat("%d of %d expected GPUs visible", visible, expected_gpus);
    r.details["visible"] = absl::StrCat(visible);
    r.details["expected"] = absl::StrCat(expected_gpus);
    out.push_back(std::move(r));
  }
  return out;
}

InspectionResult EvaluateDcgmHealth(const DcgmHealth& health, absl::Time now) {
  InspectionResult r;
  r.kind = "gpu";
  r.component = "dcgm";
  r.observed_at = now;
  r.details["overall"] = health.overall;
  std::vector<std::string> parts;
  for (const DcgmIncident& i : health.incidents) {
    parts.push_back(absl::StrCat(i.gpu.empty() ? "" : absl::StrCat("GPU ", i.gpu, ": "),
                                 i.health, i.message.empty() ? "" : " - ", i.message));
    if (!i.gpu.empty()) r.details[absl::StrCat("gpu", i.gpu)] = i.health;
  }
  if (health.overall == "Failure") {
    r.status = InspectionOutcome::kFault;
    r.machine_attributed = true;
  } else if (health.overall == "Warning") {
    r.status = InspectionOutcome::kWarning;
  } else {
    r.status = InspectionOutcome::kOk;
  }
  r.summary = parts.empty() ? absl::StrCat("DCGM health: ", health.overall)
                            : absl::StrJoin(parts, "; ");
  return r;
}

// ------------------------------------------------------------------------------- NVML

namespace {

// The first non-empty line of `text`, whitespace-trimmed.
std::string FirstLine(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) return std::string(line);
  }
  return "";
}

// The subset of nvml.h this file uses (NVML's C ABI is stable across driver releases).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorGpuIsLost = 15;
constexpr int kNvmlTemperatureGpu = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;
constexpr int kNvmlMemoryErrorCorrected = 0;
constexpr int kNvmlMemoryErrorUncorrected = 1;
constexpr int kNvmlVolatileEcc = 0;

class DlNvml : public NvmlGpuSource {
 public:
  ~DlNvml() override {
    if (shutdown_ != nullptr) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  static absl::StatusOr<std::unique_ptr<NvmlGpuSource>> Open(const std::string& library) {
    void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      return absl::NotFoundError(absl::StrCat("cannot load ", library, ": ",
                                              err != nullptr ? err : "unknown error"));
    }
    auto nvml = std::unique_ptr<DlNvml>(new DlNvml());
    nvml->handle_ = handle;
    auto sym = [handle](const char* name) { return dlsym(handle, name); };
    nvml->init_ = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
    nvml->shutdown_ = nullptr;
    auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
    nvml->error_string_ = reinterpret_cast<const char* (*)(nvmlReturn_t)>(sym("nvmlErrorString"));
    nvml->count_ = reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
    nvml->handle_by_index_ = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(
        sym("nvmlDeviceGetHandleByIndex_v2"));
    nvml->temperature_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*)>(
        sym("nvmlDeviceGetTemperature"));
    nvml->clock_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*)>(
        sym("nvmlDeviceGetClockInfo"));
    void* reasons = sym("nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr) reasons = sym("nvmlDeviceGetCurrentClocksThrottleReasons");
    nvml->reasons_ =
        reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*)>(reasons);
    nvml->power_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>(
        sym("nvmlDeviceGetPowerUsage"));
    nvml->utilization_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(
        sym("nvmlDeviceGetUtilizationRates"));
    nvml->ecc_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*)>(
        sym("nvmlDeviceGetTotalEccErrors"));
    nvml->remapped_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*,
                                                        unsigned int*, unsigned int*)>(
        sym("nvmlDeviceGetRemappedRows"));
    nvml->uuid_ = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>(
        sym("nvmlDeviceGetUUID"));
    if (nvml->init_ == nullptr || shutdown == nullptr || nvml->count_ == nullptr ||
        nvml->handle_by_index_ == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(library, " lacks nvmlInit_v2/nvmlDeviceGetCount_v2/"
                                "nvmlDeviceGetHandleByIndex_v2"));
    }
    const nvmlReturn_t rc = nvml->init_();
    if (rc != kNvmlSuccess) {
      return absl::UnavailableError(absl::StrCat("nvmlInit_v2 failed: ", nvml->Error(rc)));
    }
    nvml->shutdown_ = shutdown;
    return std::unique_ptr<NvmlGpuSource>(std::move(nvml));
  }

  absl::StatusOr<GpuReport> Sample() override {
    GpuReport report;
    report.source = "nvml";
    unsigned int count = 0;
    nvmlReturn_t rc = count_(&count);
    if (rc != kNvmlSuccess) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2: ", Error(rc)));
    }
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      rc = handle_by_index_(i, &dev);
      if (rc != kNvmlSuccess) {
        report.lost.push_back(absl::StrCat("gpu", i, " (", Error(rc), ")"));
        continue;
      }
      GpuSample s;
      s.index = static_cast<int>(i);
      bool lost = false;
      auto ok = [&](nvmlReturn_t r) {
        if (r == kNvmlErrorGpuIsLost) lost = true;
        return r == kNvmlSuccess;
      };
      char uuid[96] = {0};
      if (uuid_ != nullptr && ok(uuid_(dev, uuid, sizeof(uuid)))) s.uuid = uuid;
      unsigned int v = 0;
      if (temperature_ != nullptr && ok(temperature_(dev, kNvmlTemperatureGpu, &v))) s.temperature_c = v;
      if (clock_ != nullptr && ok(clock_(dev, kNvmlClockSm, &v))) s.sm_clock_mhz = v;
      if (clock_ != nullptr && ok(clock_(dev, kNvmlClockMem, &v))) s.mem_clock_mhz = v;
      unsigned long long bits = 0;
      if (reasons_ != nullptr && ok(reasons_(dev, &bits))) s.throttle_reasons = bits;
      if (power_ != nullptr && ok(power_(dev, &v))) s.power_w = v / 1000.0;  // milliwatts
      nvmlUtilization_t util{};
      if (utilization_ != nullptr && ok(utilization_(dev, &util))) {
        s.utilization_gpu_pct = util.gpu;
        s.utilization_mem_pct = util.memory;
      }
      unsigned long long ecc = 0;
      if (ecc_ != nullptr && ok(ecc_(dev, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &ecc))) {
        s.ecc_uncorrected_volatile = ecc;
      }
      if (ecc_ != nullptr && ok(ecc_(dev, kNvmlMemoryErrorCorrected, kNvmlVolatileEcc, &ecc))) {
        s.ecc_corrected_volatile = ecc;
      }
      unsigned int corr = 0, unc = 0, pending = 0, failed = 0;
      if (remapped_ != nullptr && ok(remapped_(dev, &corr, &unc, &pending, &failed))) {
        s.remap_pending = pending != 0;
        s.remap_failure = failed != 0;
      }
      if (lost) {
        report.lost.push_back(absl::StrCat("gpu", i));
      } else {
        report.gpus.push_back(std::move(s));
      }
    }
    return report;
  }

 private:
  DlNvml() = default;
  std::string Error(nvmlReturn_t rc) const {
    const char* s = error_string_ != nullptr ? error_string_(rc) : nullptr;
    return s != nullptr ? absl::StrCat(s, " (", rc, ")") : absl::StrCat("NVML error ", rc);
  }

  void* handle_ = nullptr;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock_)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*reasons_)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*ecc_)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*remapped_)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*,
                            unsigned int*) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
};

InspectionResult Single(InspectionOutcome status, std::string component, std::string summary,
                        absl::Time now) {
  InspectionResult r;
  r.kind = "gpu";
  r.component = std::move(component);
  r.status = status;
  r.summary = std::move(summary);
  r.observed_at = now;
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlGpuSource>> NvmlGpuSource::Load(const std::string& library) {
  return DlNvml::Open(library);
}

GpuInspection::GpuInspection(GpuInspectionOptions options, CommandRunner runner)
    : options_(std::move(options)), runner_(std::move(runner)) {}

GpuInspection::~GpuInspection() = default;

// A bus id is [PCI:]<domain>:<bus>:<device>[.<function>] in hex: the driver prints a
// 4-digit domain in Xid lines, nvidia-smi an 8-digit one in upper case; both name the same
// device, so the domain is reduced to its value (printed with 4 digits, or more when it
// needs them) and the function dropped (a GPU is function 0).
std::optional<std::string> NormalizePciBusId(absl::string_view id) {
  id = absl::StripAsciiWhitespace(id);
  if (absl::StartsWithIgnoreCase(id, "PCI:")) id.remove_prefix(4);
  if (const size_t dot = id.find('.'); dot != absl::string_view::npos) {
    const absl::string_view function = id.substr(dot + 1);
    if (function.size() != 1 || !absl::ascii_isxdigit(static_cast<unsigned char>(function[0]))) return std::nullopt;
    id = id.substr(0, dot);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(id, ':');
  if (parts.size() != 3) return std::nullopt;
  const size_t max_digits[] = {8, 2, 2};
  uint32_t values[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const absl::string_view p = parts[i];
    if (p.empty() || p.size() > max_digits[i]) return std::nullopt;
    for (char c : p) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    }
    values[i] = static_cast<uint32_t>(std::stoul(std::string(p), nullptr, 16));
  }
  if (values[2] > 0x1f) return std::nullopt;  // a PCI device number has 5 bits
  return absl::StrFormat("%04x:%02x:%02x", values[0], values[1], values[2]);
}

absl::StatusOr<std::vector<std::string>> ParseGpuBusIds(absl::string_view text) {
  std::vector<std::string> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::optional<std::string> id = NormalizePciBusId(line);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrFormat("nvidia-smi pci.bus_id line %d is not a PCI bus id: \"%s\"", line_no, line.substr(0, 80)));
    }
    out.push_back(*std::move(id));
  }
  return out;
}

std::vector<InspectionResult> GpuInspection::Run(absl::Time now) {
  if (!nvml_tried_ && !options_.nvml_library.empty()) {
    nvml_tried_ = true;
    absl::StatusOr<std::unique_ptr<NvmlGpuSource>> nvml = NvmlGpuSource::Load(options_.nvml_library);
    if (nvml.ok()) {
      nvml_ = *std::move(nvml);
    } else {
      nvml_error_ = std::string(nvml.status().message());
    }
  }
  std::vector<std::string> tried;
  std::optional<GpuReport> report;
  if (nvml_ != nullptr) {
    absl::StatusOr<GpuReport> sampled = nvml_->Sample();
    if (sampled.ok()) {
      report = *std::move(sampled);
    } else {
      tried.push_back(absl::StrCat("NVML: ", sampled.status().message()));
    }
  } else if (!options_.nvml_library.empty()) {
    tried.push_back(absl::StrCat("NVML: ", nvml_error_));
  }
  bool smi_missing = options_.nvidia_smi.empty();
  if (!report && !options_.nvidia_smi.empty()) {
    absl::StatusOr<CommandResult> out = runner_(
        {options_.nvidia_smi, absl::StrCat("--query-gpu=", kNvidiaSmiQuery),
         "--format=csv,noheader,nounits"},
        options_.command_timeout);
    if (!out.ok()) {
      smi_missing = out.status().code() == absl::StatusCode::kNotFound;
      tried.push_back(absl::StrCat("nvidia-smi: ", out.status().message()));
    } else {
      absl::StatusOr<GpuReport> parsed = ParseNvidiaSmiCsv(out->stdout_text);
      if (!parsed.ok()) {
        return {Single(InspectionOutcome::kError, "gpus",
                       absl::StrCat("unparseable nvidia-smi output: ", parsed.status().message()),
                       now)};
      }
      if (out->exit_code != 0 && parsed->gpus.empty() && parsed->lost.empty()) {
        tried.push_back(absl::StrCat("nvidia-smi exited ", out->exit_code, ": ",
                                     absl::StripAsciiWhitespace(out->stdout_text.substr(0, 200)),
                                     absl::StripAsciiWhitespace(out->stderr_text.substr(0, 200))));
      } else {
        report = *std::move(parsed);
      }
    }
  }
  std::vector<InspectionResult> results;
  if (!report) {
    const std::string why = absl::StrJoin(tried, "; ");
    if (options_.expected_gpus > 0) {
      InspectionResult r = Single(InspectionOutcome::kFault, "gpus",
                                  absl::StrFormat("no GPU visible, %d expected (%s)",
                                                  options_.expected_gpus, why),
                                  now);
      r.machine_attributed = true;
      results.push_back(std::move(r));
    } else if (nvml_ == nullptr && smi_missing) {
      results.push_back(Single(InspectionOutcome::kNotPresent, "gpus",
                               absl::StrCat("no NVIDIA GPU on this machine (", why, ")"), now));
    } else {
      results.push_back(Single(InspectionOutcome::kNotPresent, "gpus",
                               absl::StrCat("no NVIDIA GPU reachable (", why, ")"), now));
    }
  } else {
    results = EvaluateGpus(*report, options_.expected_gpus, options_.thresholds, now);
    if (results.empty()) {
      results.push_back(Single(InspectionOutcome::kNotPresent, "gpus",
                               absl::StrCat(report->source, " reports no GPU"), now));
    }
  }
  if (!options_.dcgmi.empty() && report && !report->gpus.empty()) {
    absl::StatusOr<CommandResult> out =
        runner_({options_.dcgmi, "health", "-c"}, options_.command_timeout);
    if (out.ok() && DcgmHostEngineUnreachable(absl::StrCat(out->stdout_text, "\n", out->stderr_text))) {
      InspectionResult r = Single(
          InspectionOutcome::kCannotSee, "dcgm",
          absl::StrCat("cannot see DCGM health from here (DCGM's host engine is unreachable): ",
                       FirstLine(out->stdout_text.empty() ? out->stderr_text : out->stdout_text)),
          now);
      r.details["reason"] = "host engine unreachable";
      results.push_back(std::move(r));
    } else if (out.ok()) {
      absl::StatusOr<DcgmHealth> health = ParseDcgmHealth(out->stdout_text);
      if (health.ok()) {
        results.push_back(EvaluateDcgmHealth(*health, now));
      } else {
        results.push_back(Single(InspectionOutcome::kError, "dcgm",
                                 absl::StrCat("dcgmi health -c: ", health.status().message()), now));
      }
    } else if (out.status().code() != absl::StatusCode::kNotFound) {
      results.push_back(Single(InspectionOutcome::kError, "dcgm",
                               absl::StrCat("dcgmi health -c: ", out.status().message()), now));
    }
  }
  return results;
}

bool DcgmHostEngineUnreachable(absl::string_view output) {
  // dcgmi prints, without a running nv-hostengine (or one it may not reach):
  //   Error: unable to establish a connection to the specified host: localhost
  //   Error: Unable to connect to host engine. Host engine connection invalid/disconnected.
  const std::string lower = absl::AsciiStrToLower(output);
  return absl::StrContains(lower, "unable to connect to host engine") ||
         absl::StrContains(lower, "unable to establish a connection to the specified host") ||
         absl::StrContains(lower, "host engine connection invalid");
}

}  // namespace peregrine
