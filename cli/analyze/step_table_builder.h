// Internal to step_times.cc: collects the rows of a step-time table as they are read, and
// applies the rules of step_times.h to them (skipped rows and cells with their reasons,
// exact and conflicting duplicates, strict mode), then finishes the table (units, order,
// stride). Pure; no I/O. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_STEP_TABLE_BUILDER_H_
#define PEREGRINE_CLI_ANALYZE_STEP_TABLE_BUILDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/analyze/step_times.h"

namespace peregrine::analyze_internal {

// "SOURCE:LINE: message" as kInvalidArgument.
absl::Status StepLineError(absl::string_view source, int line, absl::string_view message);

class StepTableBuilder {
 public:
  StepTableBuilder(absl::string_view source, bool strict) : source_(source), strict_(strict) {}

  // The index of `worker`, added (in first-seen order) when new.
  size_t Worker(const std::string& worker);

  // A row that cannot be read: the error in strict mode, else OK after counting it.
  absl::Status SkipRow(int line, absl::string_view reason);
  // A cell of a wide row that cannot be read (the rest of the row is kept).
  absl::Status SkipCell(int line, absl::string_view reason);

  struct Cell {
    size_t worker = 0;
    int64_t step = 0;
    double time = 0;  // as written, in the file's unit
  };
  // The cells of one row (long: one). Cells whose worker and step were read before are
  // dropped and make the row an exact duplicate (every such time equal) or a conflicting
  // one; in strict mode either is an error naming both lines.
  absl::Status AddRow(int line, const std::vector<Cell>& cells);

  // The table: times multiplied by `seconds_per_unit` when it is > 0 (unit "s"), else as
  // written (unit ""); series sorted by step; workers sorted by name when `sort_workers`;
  // stride and gaps measured; the warnings written. An error when no time was read.
  absl::StatusOr<StepTimesTable> Finish(StepTableFormat format, bool sort_workers,
                                        const std::string& source_unit, double seconds_per_unit,
                                        std::vector<std::string> notes);

 private:
  std::string source_;
  bool strict_;
  std::vector<WorkerStepTimes> workers_;
  std::map<std::string, size_t> index_;
  std::map<std::pair<size_t, int64_t>, std::pair<int, double>> seen_;  // -> (line, time)
  int64_t skipped_rows_ = 0, skipped_cells_ = 0, exact_ = 0, conflicting_ = 0;
  std::vector<std::string> skip_reasons_, cell_reasons_, exact_examples_, conflict_examples_;
};

}  // namespace peregrine::analyze_internal

#endif  // PEREGRINE_CLI_ANALYZE_STEP_TABLE_BUILDER_H_
