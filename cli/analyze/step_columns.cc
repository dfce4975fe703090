#include "cli/analyze/step_columns.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/analyze/text_input.h"

namespace peregrine::analyze_internal {

// "Iter_Time (ms)" -> "itertimems": lower case, only letters and digits.
std::string NormalizeHeader(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) out += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  return out;
}

bool IsWorkerAlias(const std::string& h) {
  static const char* kAliases[] = {"worker", "rank", "globalrank", "host",   "hostname", "node",
                                   "pod",    "machine", "gpu",     "device", "workerid", "rankid"};
  return std::find(std::begin(kAliases), std::end(kAliases), h) != std::end(kAliases);
}

bool IsStepAlias(const std::string& h) {
  static const char* kAliases[] = {"step", "iteration", "iter", "stepid", "globalstep", "iterationid"};
  return std::find(std::begin(kAliases), std::end(kAliases), h) != std::end(kAliases);
}

// The unit of a time column ("s", "ms", "us"), or nullopt when `h` is not a time alias.
std::optional<std::string> TimeAliasUnit(const std::string& h) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"seconds", "s"},    {"sec", "s"},        {"s", "s"},           {"time", "s"},
      {"timesec", "s"},    {"times", "s"},      {"duration", "s"},    {"durations", "s"},
      {"elapsed", "s"},    {"steptime", "s"},   {"itertime", "s"},    {"iterationtime", "s"},
      {"ms", "ms"},        {"timems", "ms"},    {"iterms", "ms"},     {"durationms", "ms"},
      {"elapsedms", "ms"}, {"steptimems", "ms"}, {"itertimems", "ms"}, {"iterationtimems", "ms"},
      {"us", "us"},        {"timeus", "us"},    {"durationus", "us"}};
  for (const auto& [alias, unit] : kAliases) {
    if (h == alias) return std::string(unit);
  }
  return std::nullopt;
}

// The unit a column name ends with ("step_time_ms", "Iter Time (sec)", "train/step_time [us]"),
// or "" when its last word names none.
std::string UnitFromName(absl::string_view name) {
  std::vector<std::string> words =
      absl::StrSplit(absl::AsciiStrToLower(name), absl::ByAnyChar(" _-/()[].:"), absl::SkipEmpty());
  if (words.empty()) return "";
  static const std::pair<const char*, const char*> kWords[] = {
      {"s", "s"},       {"sec", "s"},        {"secs", "s"},     {"second", "s"},       {"seconds", "s"},
      {"ms", "ms"},     {"msec", "ms"},      {"msecs", "ms"},   {"millis", "ms"},      {"milliseconds", "ms"},
      {"us", "us"},     {"usec", "us"},      {"usecs", "us"},   {"micros", "us"},      {"microseconds", "us"},
      {"ns", "ns"},     {"nsec", "ns"},      {"nsecs", "ns"},   {"nanos", "ns"},       {"nanoseconds", "ns"},
      {"min", "min"},   {"mins", "min"},     {"minute", "min"}, {"minutes", "min"}};
  for (const auto& [word, unit] : kWords) {
    if (words.back() == word) return unit;
  }
  return "";
}

// The unit of a time column by its name: a time alias, or a name with a time word (time,
// duration, elapsed, latency) ending in a unit word ("train_step_time_ms", "Iter Time (min)");
// "" when the name is not a time column's.
std::string TimeColumnUnit(absl::string_view name) {
  const std::string h = NormalizeHeader(name);
  if (std::optional<std::string> unit = TimeAliasUnit(h)) return *unit;
  for (const char* word : {"time", "duration", "elapsed", "latency"}) {
    if (absl::StrContains(h, word)) return UnitFromName(name);
  }
  return "";
}

char DetectDelimiter(absl::string_view header) {
  if (header.find(',') != absl::string_view::npos) return ',';
  if (header.find('\t') != absl::string_view::npos) return '\t';
  if (header.find(';') != absl::string_view::npos) return ';';
  return ',';
}

// Splits one CSV record; fields may be double-quoted ("" is a quote inside quotes). The
// error has no "SOURCE:LINE:" prefix.
absl::StatusOr<std::vector<std::string>> SplitRecord(absl::string_view line, char delimiter) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c == '"' && absl::StripAsciiWhitespace(field).empty() && !was_quoted) {
      quoted = was_quoted = true;
      field.clear();
    } else if (c == delimiter) {
      fields.push_back(std::string(absl::StripAsciiWhitespace(field)));
      field.clear();
      was_quoted = false;
    } else {
      field += c;
    }
  }
  if (quoted) return absl::InvalidArgumentError(absl::StrCat("unterminated quoted field: ", Excerpt(line)));
  fields.push_back(std::string(absl::StripAsciiWhitespace(field)));
  return fields;
}

// Cell readers: the error names the column and the text, without "SOURCE:LINE:".
absl::StatusOr<double> ParseTime(const std::string& cell, const std::string& column) {
  if (cell.empty()) return absl::InvalidArgumentError(absl::StrCat("column '", column, "' is empty"));
  double v = 0;
  if (!absl::SimpleAtod(cell, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("column '", column, "': not a number: '", Excerpt(cell), "'"));
  }
  // The bound keeps any unit's conversion to seconds finite.
  if (!std::isfinite(v) || v < 0 || v >= 1e15) {
    return absl::InvalidArgumentError(absl::StrCat("column '", column, "': a time must be finite, >= 0 and below 1e15, got '",
                                                   Excerpt(cell), "'"));
  }
  return v;
}

absl::StatusOr<int64_t> ParseStep(const std::string& cell, const std::string& column) {
  if (cell.empty()) return absl::InvalidArgumentError(absl::StrCat("column '", column, "' is empty"));
  int64_t v = 0;
  if (!absl::SimpleAtoi(cell, &v)) {
    // Exported tables often write integral steps as floats ("1200.0").
    double d = 0;
    if (!absl::SimpleAtod(cell, &d) || !std::isfinite(d) || d != std::floor(d) || std::abs(d) > 9.0e15) {
      return absl::InvalidArgumentError(
          absl::StrCat("column '", column, "': not an integer step: '", Excerpt(cell), "'"));
    }
    v = static_cast<int64_t>(d);
  }
  return v;
}

}  // namespace peregrine::analyze_internal
