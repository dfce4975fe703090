// Fuzzes ReadPickle (cli/analyze/pickle_reader.h) and, on what it reads, the flight
// recorder model (cli/analyze/flight_recorder.h) and its analysis (fr_analysis.h): the
// per-rank dumps of `peregrinectl analyze fr`. Any input must end in a value or an error
// that names an offset, never in a crash, a leak or unbounded work; a dump that parses
// must analyse.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "cli/analyze/flight_recorder.h"
#include "cli/analyze/fr_analysis.h"
#include "cli/analyze/pickle_reader.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  peregrine::PickleLimits limits;
  limits.max_values = 1u << 16;  // small enough to keep each run fast
  absl::StatusOr<peregrine::PickleValue> value = peregrine::ReadPickle(bytes, limits);
  if (!value.ok()) FUZZ_CHECK(absl::StartsWith(value.status().message(), "offset "));

  absl::StatusOr<peregrine::FrDump> dump = peregrine::ParseFlightRecorderDump(bytes, "fuzz");
  if (!dump.ok()) {
    FUZZ_CHECK(absl::StartsWith(dump.status().message(), "fuzz: "));
    return 0;
  }
  // The same dump as two ranks, so the cross-rank comparison runs too.
  std::vector<peregrine::FrRankDump> dumps = {{0, *dump}, {1, *dump}};
  const peregrine::FrReport report = peregrine::AnalyzeFlightRecorder(dumps);
  for (const peregrine::FrGroupReport& g : report.groups) FUZZ_CHECK(!g.explanation.empty());
  return 0;
}
