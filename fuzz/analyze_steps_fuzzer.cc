// Fuzzes ParseStepTimesCsv (cli/analyze/step_times.h): the step-time CSV of `peregrinectl
// analyze steps`. The first byte picks the table format (auto, long, wide); the rest is
// the CSV.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cli/analyze/step_times.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr peregrine::StepTableFormat kFormats[] = {
      peregrine::StepTableFormat::kAuto, peregrine::StepTableFormat::kLong, peregrine::StepTableFormat::kWide};
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)peregrine::ParseStepTimesCsv(text, "fuzz", kFormats[data[0] % 3]);
  return 0;
}
