// Step-time tables from users' own logs (CSV, TSV or JSON lines), for `peregrinectl analyze
// steps`.
//
// Layouts (the first non-blank, non-'#' line is the header, unless it is data: see below):
//   long:  one row per (worker, step): a worker column, a step column and a time column, in
//          any order, other columns ignored. Header names are matched case-insensitively,
//          ignoring spaces and punctuation:
//            worker: worker, rank, globalrank, host, hostname, node, pod, machine, gpu,
//                    device, workerid, rankid
//            step:   step, iteration, iter, stepid, globalstep, iterationid, _step
//            time:   seconds, sec, s, time, timesec, times, duration, durations, elapsed,
//                    steptime, itertime, iterationtime (seconds); ms, timems, iterms,
//                    durationms, elapsedms, steptimems, itertimems, iterationtimems
//                    (milliseconds); us, timeus, durationus (microseconds)
//          StepTableOptions names the columns explicitly (by name or 1-based index). Without
//          a worker column the file is one worker's series (named after the source); without
//          a step column each worker's rows are numbered 0, 1, 2, ... in file order.
//   wide:  one row per step and one column per worker (the header names the workers); an
//          optional step column numbers the rows, else rows are steps 0, 1, 2, ... in file
//          order. An empty cell means the worker logged nothing there. Columns whose name
//          ends in "__MIN" or "__MAX" (the envelope columns of a Weights & Biases chart
//          export) are not workers and are ignored.
//   JSON lines: one object per line, {"rank": 0, "step": 12, "time": 0.31}, keys matched as
//          the long layout's columns (or named by StepTableOptions).
// Auto-detection: JSON lines when the first line starts with '{'; else long when a time
// column is named or found among the aliases; else wide.
// Delimiter: ',' (or tab / ';' when the header has those and no comma); fields may be
// double-quoted; a UTF-8 byte-order mark and CRLF line ends are accepted. A first line with
// a numeric field is data, not a header: accepted only when the columns are named by index.
//
// Units: the unit comes from StepTableOptions::unit, else from the time column's name (a
// unit word such as "ms", "sec", "us", "ns", "min", or a seconds alias above). When it is
// known, every time is converted to seconds and the table's unit is "s"; when it is not
// (wide tables, a time column named without a unit), times stay as written and the unit
// is "".
//
// Bad rows: by default a row that cannot be read (unsplittable, wrong number of fields,
// empty or malformed cell, negative or non-finite time) is skipped and counted, with the
// first few reasons in `warnings`; an exact duplicate (same worker, step and time) is
// dropped and counted; a conflicting duplicate (same worker and step, another time) keeps
// the first and is counted, the warning naming both lines. With `strict` the first such
// row is an error, as are duplicates. A file with no usable row is an error.
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
  StepTableFormat format = StepTableFormat::kLong;  // the layout actually parsed (JSON lines: long)
  // "s" when the unit is known (times converted to seconds), else "" (times as written).
  std::string unit;
  std::string source_unit;  // the unit the file was written in ("ms", ...), "" when unknown
  // long: sorted by name with numbers compared by value ("rank2" before "rank10");
  // wide: in column order.
  std::vector<WorkerStepTimes> workers;
  // What was done to read the file, one sentence each, for the report's notes: skipped
  // rows with the first reasons ("SOURCE:LINE: reason"), duplicates, numbering, stride.
  std::vector<std::string> warnings;
  int64_t skipped_rows = 0;        // rows not read (wide: rows whose step could not be read)
  int64_t skipped_cells = 0;       // wide: unreadable time cells skipped in rows kept
  int64_t duplicate_rows = 0;      // exact and conflicting duplicates dropped
  int64_t conflicting_rows = 0;    // of which the time differed from the first row's
  bool steps_numbered = false;     // no step column: rows numbered 0, 1, 2, ... per worker
  // The difference between consecutive logged steps when at least half of them (over all
  // workers) share it: 1 for every step logged, k > 1 when every k-th step is logged; 0
  // when there is no such difference (fewer than two steps, or irregular steps).
  int64_t step_stride = 0;
  int64_t step_gaps = 0;  // with a stride: places where consecutive steps are further apart
};

// Time units a table can be written in, by the name `--unit` takes.
inline constexpr const char* kStepTimeUnits[] = {"s", "ms", "us", "ns", "min"};
// Seconds per `unit` ("s", "ms", "us", "ns", "min"); 0 for anything else.
double SecondsPerUnit(absl::string_view unit);

struct StepTableOptions {
  StepTableFormat format = StepTableFormat::kAuto;
  // Columns (JSON lines: keys) by header name, matched case-insensitively, or by 1-based
  // index ("3"); "" picks them by the aliases above. A worker or time column selects the
  // long layout; the step column serves both layouts.
  std::string worker_column;
  std::string step_column;
  std::string time_column;
  // "s", "ms", "us", "ns" or "min": the unit of the times, overriding the one the time
  // column's name implies (and giving wide tables one). "" infers it.
  std::string unit;
  bool strict = false;  // the first unreadable or duplicate row is an error
};

// Parses `text` (the contents of `source`, used in error messages and to name a file's
// only worker when it has no worker column).
absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 const StepTableOptions& options);
// The same with only the layout chosen.
absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 StepTableFormat format = StepTableFormat::kAuto);

// The unit times read best in ("s", "ms" or "us"): the largest whose median step time is
// at least 1, from a table whose unit is "s"; the table's own unit otherwise.
std::string ReadableStepTimeUnit(const StepTimesTable& table);
// Converts a table in seconds to `unit` (one of kStepTimeUnits) in place.
void ConvertStepTimes(StepTimesTable& table, absl::string_view unit);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_STEP_TIMES_H_
