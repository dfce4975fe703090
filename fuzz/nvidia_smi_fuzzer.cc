// Fuzzes the GPU tool parsers (agent/inspection/gpu_inspection.h): nvidia-smi's CSV
// query output and `dcgmi health -c`'s table, then the pure judges over what parsed.
// The whole input is given to both parsers.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/inspection/gpu_inspection.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  auto report = peregrine::ParseNvidiaSmiCsv(text);
  if (report.ok()) {
    (void)peregrine::EvaluateGpus(*report, 8, peregrine::GpuThresholds{}, now);
  }
  auto health = peregrine::ParseDcgmHealth(text);
  if (health.ok()) (void)peregrine::EvaluateDcgmHealth(*health, now);
  return 0;
}
