// Fuzzes ReadFaultTrace and ParseFaultTrace (fleetsim/fault_trace.h): the fault trace CSV of
// peregrine-sim. The first byte picks the job: bits 0-5 the machine count (0..63), bit 6
// node names ("n0".."n<k>") instead of indexes. The rest is the file. Properties: both
// readers agree (strict succeeds exactly when the lenient reader skipped nothing, with the
// same faults); every fault is on a known machine, has end >= start >= 0, a severity > 0
// exactly when it is a fail-slow (with end > start), and the list is sorted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fleetsim/fault_model.h"
#include "fleetsim/fault_trace.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace fs = peregrine::fleetsim;
  const int machines = data[0] & 63;
  fs::FaultTraceOptions options;
  if ((data[0] & 64) != 0) {
    for (int i = 0; i < machines; ++i) options.node_names.push_back("n" + std::to_string(i));
  }
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<fs::FaultTraceRead> read = fs::ReadFaultTrace(text, machines, options);
  FUZZ_CHECK(read.ok());  // the arguments are always valid here
  absl::StatusOr<std::vector<fs::FaultEvent>> strict = fs::ParseFaultTrace(text, machines, options);
  FUZZ_CHECK(strict.ok() == (read->skipped_lines == 0));
  FUZZ_CHECK(read->fault_lines == static_cast<int64_t>(read->faults.size()));
  FUZZ_CHECK(read->errors.size() <= 20 &&
             static_cast<int64_t>(read->errors.size()) <= read->skipped_lines);
  if (strict.ok()) {
    FUZZ_CHECK(strict->size() == read->faults.size());
  } else {
    FUZZ_CHECK(std::string(strict.status().message()).rfind("fault trace line ", 0) == 0);
  }
  for (size_t i = 0; i < read->faults.size(); ++i) {
    const fs::FaultEvent& e = read->faults[i];
    FUZZ_CHECK(e.machine >= 0 && e.machine < machines);
    FUZZ_CHECK(e.start_ns >= 0 && e.end_ns >= e.start_ns);
    if (fs::IsFailSlow(e.kind)) {
      FUZZ_CHECK(e.severity > 0 && e.end_ns > e.start_ns);
    } else {
      FUZZ_CHECK(e.severity == 0);
    }
    if (i > 0) {
      const fs::FaultEvent& p = read->faults[i - 1];
      FUZZ_CHECK(p.start_ns < e.start_ns ||
                 (p.start_ns == e.start_ns && p.machine <= e.machine));
    }
    if (strict.ok()) {
      const fs::FaultEvent& s = (*strict)[i];
      FUZZ_CHECK(s.machine == e.machine && s.start_ns == e.start_ns && s.end_ns == e.end_ns &&
                 s.kind == e.kind && s.severity == e.severity);
    }
  }
  return 0;
}
