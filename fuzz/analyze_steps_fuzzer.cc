// Fuzzes ParseStepTimesCsv (cli/analyze/step_times.h): the step-time CSV / JSON lines of
// `peregrinectl analyze steps`. The first byte picks the options: bits 0-1 the table format
// (auto, long, wide; 3 is auto), bit 2 --strict, bits 3-5 --unit (none, s, ms, us, ns, min),
// bits 6-7 the column flags (none; indexes 1, 2, 3; names worker, step, seconds; names rank,
// iter, time_ms). The rest is the file. A table that parses must keep the contract: per
// worker, steps strictly increasing, one finite time >= 0 per step, unit "s" or "", and the
// counts consistent; converting it to its readable unit keeps every series' length.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cli/analyze/step_times.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using peregrine::StepTableFormat;
  static constexpr StepTableFormat kFormats[] = {StepTableFormat::kAuto, StepTableFormat::kLong,
                                                 StepTableFormat::kWide, StepTableFormat::kAuto};
  static constexpr const char* kUnits[] = {"", "s", "ms", "us", "ns", "min", "", ""};
  static constexpr const char* kColumns[][3] = {
      {"", "", ""}, {"1", "2", "3"}, {"worker", "step", "seconds"}, {"rank", "iter", "time_ms"}};
  const uint8_t selector = data[0];
  peregrine::StepTableOptions options;
  options.format = kFormats[selector & 3];
  options.strict = (selector & 4) != 0;
  options.unit = kUnits[(selector >> 3) & 7];
  options.worker_column = kColumns[selector >> 6][0];
  options.step_column = kColumns[selector >> 6][1];
  options.time_column = kColumns[selector >> 6][2];
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<peregrine::StepTimesTable> table = peregrine::ParseStepTimesCsv(text, "fuzz", options);
  if (!table.ok()) return 0;
  FUZZ_CHECK(table->unit == "s" || table->unit.empty());
  FUZZ_CHECK(table->duplicate_rows >= table->conflicting_rows && table->conflicting_rows >= 0);
  FUZZ_CHECK(table->skipped_rows >= 0 && table->skipped_cells >= 0 && table->step_stride >= 0);
  FUZZ_CHECK(!options.strict || (table->skipped_rows == 0 && table->duplicate_rows == 0));
  size_t total = 0;
  for (const peregrine::WorkerStepTimes& w : table->workers) {
    FUZZ_CHECK(w.steps.size() == w.times.size());
    for (size_t i = 0; i < w.steps.size(); ++i) {
      FUZZ_CHECK(i == 0 || w.steps[i - 1] < w.steps[i]);
      FUZZ_CHECK(std::isfinite(w.times[i]) && w.times[i] >= 0);
    }
    total += w.steps.size();
  }
  FUZZ_CHECK(total > 0);  // a table with no time is an error
  peregrine::StepTimesTable converted = *table;
  peregrine::ConvertStepTimes(converted, peregrine::ReadableStepTimeUnit(converted));
  FUZZ_CHECK(converted.workers.size() == table->workers.size());
  for (size_t i = 0; i < converted.workers.size(); ++i) {
    FUZZ_CHECK(converted.workers[i].times.size() == table->workers[i].times.size());
  }
  return 0;
}
