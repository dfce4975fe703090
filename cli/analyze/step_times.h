// Step-time tables from users' own logs, as CSV, for `peregrinectl analyze steps`.
//
// Two layouts are accepted (the first non-blank, non-'#' line is the header):
//   long:  one row per (worker, step): a worker column, a step column and a time column, in
//          any order, other columns ignored. Header names are matched case-insensitively,
//          ignoring spaces, '-' and '_':
//            worker: worker, rank, globalrank, host, hostname, node, pod, machine, gpu,
//                    device, workerid, rankid
//            step:   step, iteration, iter, stepid, globalstep, iterationid
//            time:   seconds, sec, s, time, timesec, times, duration, durations, elapsed,
//                    steptime, itertime, iterationtime (seconds);
//                    ms, timems, iterms, durationms, elapsedms, steptimems, itertimems,
//                    iterationtimems (milliseconds); us, timeus, durationus (microseconds)
//   wide:  one row per step and one column per worker (the header names the workers); an
//          optional step column (a step alias above) numbers the rows, else rows are steps
//          0, 1, 2, ... in file order. An empty cell means the worker logged nothing there.
// Auto-detection: long when the header has a worker column and a time column, else wide.
// Delimiter: ',' (or tab / ';' when the header has those and no comma); fields may be
// double-quoted. Times must be finite and >= 0; steps are integers.
//
// Every error is kInvalidArgument and reads "SOURCE:LINE: problem" (or "SOURCE: problem"),
// naming the column and the offending text. Pure parsing: no I/O. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_STEP_TIMES_H_
#define PEREGRINE_CLI_ANALYZE_STEP_TIMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

enum class StepTableFormat { kAuto, kLong, kWide };
const char* StepTableFormatName(StepTableFormat format);  // "auto", "long", "wide"

// One worker's series, ordered by step.
struct WorkerStepTimes {
  std::string worker;
  std::vector<int64_t> steps;
  std::vector<double> times;  // in the table's unit, same length as steps
};

struct StepTimesTable {
  StepTableFormat format = StepTableFormat::kLong;  // the layout actually parsed
  std::string unit;  // "s", "ms", "us"; for wide tables "" (as written in the file)
  // long: sorted by name with numbers compared by value ("rank2" before "rank10");
  // wide: in column order.
  std::vector<WorkerStepTimes> workers;
};

// Parses `text` (the contents of `source`, used in error messages).
absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 StepTableFormat format = StepTableFormat::kAuto);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_STEP_TIMES_H_
