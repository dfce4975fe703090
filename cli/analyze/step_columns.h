// Internal to step_times.cc: the vocabulary of step-time tables (column-name aliases and
// unit words) and the readers of one CSV record and of one step or time cell. Pure
// functions; no I/O. Errors carry no "SOURCE:LINE:" prefix: the caller adds it.
#ifndef PEREGRINE_CLI_ANALYZE_STEP_COLUMNS_H_
#define PEREGRINE_CLI_ANALYZE_STEP_COLUMNS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine::analyze_internal {

// "Iter_Time (ms)" -> "itertimems": lower case, only letters and digits.
std::string NormalizeHeader(absl::string_view name);
// Whether a normalized name is a worker alias (worker, rank, host, ...) or a step alias
// (step, iteration, iter, ...), as listed in step_times.h.
bool IsWorkerAlias(const std::string& normalized);
bool IsStepAlias(const std::string& normalized);
// The unit of a time alias ("s", "ms", "us"), nullopt for other normalized names.
std::optional<std::string> TimeAliasUnit(const std::string& normalized);
// The unit a column name ends with ("step_time_ms", "Iter Time (sec)": "ms", "s"; also "us",
// "ns", "min"), or "" when its last word names none.
std::string UnitFromName(absl::string_view name);
// The unit of a time column by its name: a time alias, or a name with a time word (time,
// duration, elapsed, latency) ending in a unit word; "" when it is not a time column's name.
std::string TimeColumnUnit(absl::string_view name);

// ',' unless the header has no comma and a tab (then '\t') or a ';'.
char DetectDelimiter(absl::string_view header);
// One CSV record's fields, trimmed; fields may be double-quoted ("" is a quote inside).
absl::StatusOr<std::vector<std::string>> SplitRecord(absl::string_view line, char delimiter);
// A time cell: a number >= 0 and below 1e15. A step cell: an integer (or an integral float, as
// exported tables write "1200.0"). Errors name `column` and the text.
absl::StatusOr<double> ParseTime(const std::string& cell, const std::string& column);
absl::StatusOr<int64_t> ParseStep(const std::string& cell, const std::string& column);

}  // namespace peregrine::analyze_internal

#endif  // PEREGRINE_CLI_ANALYZE_STEP_COLUMNS_H_
