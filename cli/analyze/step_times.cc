#include "cli/analyze/step_times.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/analyze/text_input.h"

namespace peregrine {
namespace {

using analyze_internal::Excerpt;
using analyze_internal::SplitLines;
using analyze_internal::TextLine;

// "Iter_Time (ms)" -> "itertimems": lower case, only letters and digits.
std::string NormalizeHeader(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      out += absl::ascii_tolower(static_cast<unsigned char>(c));
    }
  }
  return out;
}

bool IsWorkerAlias(const std::string& h) {
  static const char* kAliases[] = {"worker", "rank",    "globalrank", "host",   "hostname",
                                   "node",   "pod",     "machine",    "gpu",    "device",
                                   "workerid", "rankid"};
  return std::find(std::begin(kAliases), std::end(kAliases), h) != std::end(kAliases);
}

bool IsStepAlias(const std::string& h) {
  static const char* kAliases[] = {"step", "iteration", "iter", "stepid", "globalstep",
                                   "iterationid"};
  return std::find(std::begin(kAliases), std::end(kAliases), h) != std::end(kAliases);
}

// The unit of a time column ("s", "ms", "us"), or nullopt when `h` is not a time alias.
std::optional<std::string> TimeAliasUnit(const std::string& h) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"seconds", "s"},        {"sec", "s"},          {"s", "s"},
      {"time", "s"},           {"timesec", "s"},      {"times", "s"},
      {"duration", "s"},       {"durations", "s"},    {"elapsed", "s"},
      {"steptime", "s"},       {"itertime", "s"},     {"iterationtime", "s"},
      {"ms", "ms"},            {"timems", "ms"},      {"iterms", "ms"},
      {"durationms", "ms"},    {"elapsedms", "ms"},   {"steptimems", "ms"},
      {"itertimems", "ms"},    {"iterationtimems", "ms"},
      {"us", "us"},            {"timeus", "us"},      {"durationus", "us"}};
  for (const auto& [alias, unit] : kAliases) {
    if (h == alias) return std::string(unit);
  }
  return std::nullopt;
}

char DetectDelimiter(absl::string_view header) {
  if (header.find(',') != absl::string_view::npos) return ',';
  if (header.find('\t') != absl::string_view::npos) return '\t';
  if (header.find(';') != absl::string_view::npos) return ';';
  return ',';
}

// Splits one CSV record; fields may be double-quoted ("" is a quote inside quotes).
absl::StatusOr<std::vector<std::string>> SplitRecord(absl::string_view line, char delimiter,
                                                     absl::string_view source, int number) {
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
  if (quoted) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", number, ": unterminated quoted field: ", Excerpt(line)));
  }
  fields.push_back(std::string(absl::StripAsciiWhitespace(field)));
  return fields;
}

absl::Status LineError(absl::string_view source, int number, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", number, ": ", message));
}

absl::StatusOr<double> ParseTime(const std::string& cell, const std::string& column,
                                 absl::string_view source, int number) {
  double v = 0;
  if (!absl::SimpleAtod(cell, &v)) {
    return LineError(source, number,
                     absl::StrCat("column '", column, "': not a number: '", Excerpt(cell), "'"));
  }
  if (!std::isfinite(v) || v < 0) {
    return LineError(source, number,
                     absl::StrCat("column '", column, "': a time must be finite and >= 0, got '",
                                  Excerpt(cell), "'"));
  }
  return v;
}

absl::StatusOr<int64_t> ParseStep(const std::string& cell, const std::string& column,
                                  absl::string_view source, int number) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(cell, &v)) {
    return LineError(source, number, absl::StrCat("column '", column, "': not an integer step: '",
                                                  Excerpt(cell), "'"));
  }
  return v;
}

struct Header {
  int line = 0;
  std::vector<std::string> names;       // as written
  std::vector<std::string> normalized;  // NormalizeHeader
};

// "rank2" < "rank10": runs of digits compare by value, the rest byte by byte.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = absl::ascii_isdigit(static_cast<unsigned char>(a[i]));
    const bool db = absl::ascii_isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && absl::ascii_isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && absl::ascii_isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      absl::string_view na = absl::string_view(a).substr(i, ei - i);
      absl::string_view nb = absl::string_view(b).substr(j, ej - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return (a.size() - i) < (b.size() - j);
  return a < b;
}

void SortByStep(WorkerStepTimes& w) {
  std::vector<size_t> order(w.steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return w.steps[a] < w.steps[b]; });
  WorkerStepTimes sorted{w.worker, {}, {}};
  for (size_t i : order) {
    sorted.steps.push_back(w.steps[i]);
    sorted.times.push_back(w.times[i]);
  }
  w = std::move(sorted);
}

// A data row's fields; an error when it cannot be split or has not as many fields as the
// header.
absl::StatusOr<std::vector<std::string>> SplitRow(const Header& header, const TextLine& row, char delimiter,
                                                  absl::string_view source) {
  absl::StatusOr<std::vector<std::string>> fields = SplitRecord(row.text, delimiter, source, row.number);
  if (!fields.ok()) return fields.status();
  if (fields->size() != header.names.size()) {
    return LineError(source, row.number,
                     absl::StrCat("expected ", header.names.size(), " fields as in the header, found ",
                                  fields->size(), ": ", Excerpt(row.text)));
  }
  return fields;
}

absl::StatusOr<StepTimesTable> ParseLong(const Header& header, const std::vector<TextLine>& rows,
                                         char delimiter, absl::string_view source) {
  int worker_col = -1, step_col = -1, time_col = -1;
  std::string unit;
  for (size_t i = 0; i < header.normalized.size(); ++i) {
    const std::string& h = header.normalized[i];
    if (worker_col < 0 && IsWorkerAlias(h)) {
      worker_col = static_cast<int>(i);
    } else if (step_col < 0 && IsStepAlias(h)) {
      step_col = static_cast<int>(i);
    } else if (time_col < 0) {
      if (auto u = TimeAliasUnit(h)) {
        time_col = static_cast<int>(i);
        unit = *u;
      }
    }
  }
  std::vector<std::string> missing;
  if (worker_col < 0) missing.push_back("a worker column (worker, rank, host, node, ...)");
  if (step_col < 0) missing.push_back("a step column (step, iteration, iter, ...)");
  if (time_col < 0) {
    missing.push_back("a time column (seconds, time, duration, iter_ms, duration_ms, ...)");
  }
  if (!missing.empty()) {
    return LineError(source, header.line,
                     absl::StrCat("long format needs ", absl::StrJoin(missing, ", "),
                                  "; the header has: ", absl::StrJoin(header.names, ", ")));
  }
  StepTimesTable table;
  table.format = StepTableFormat::kLong;
  table.unit = unit;
  std::map<std::string, size_t> index;
  std::map<std::pair<size_t, int64_t>, int> seen;  // (worker, step) -> line
  for (const TextLine& row : rows) {
    absl::StatusOr<std::vector<std::string>> fields = SplitRow(header, row, delimiter, source);
    if (!fields.ok()) return fields.status();
    const std::string& worker = (*fields)[worker_col];
    if (worker.empty()) {
      return LineError(source, row.number,
                       absl::StrCat("column '", header.names[worker_col], "' is empty"));
    }
    absl::StatusOr<int64_t> step =
        ParseStep((*fields)[step_col], header.names[step_col], source, row.number);
    if (!step.ok()) return step.status();
    absl::StatusOr<double> time =
        ParseTime((*fields)[time_col], header.names[time_col], source, row.number);
    if (!time.ok()) return time.status();
    auto [it, inserted] = index.emplace(worker, table.workers.size());
    if (inserted) table.workers.push_back({worker, {}, {}});
    auto [dup, fresh] = seen.emplace(std::make_pair(it->second, *step), row.number);
    if (!fresh) {
      return LineError(source, row.number,
                       absl::StrCat("worker '", worker, "' step ", *step,
                                    " appears twice (first on line ", dup->second, ")"));
    }
    table.workers[it->second].steps.push_back(*step);
    table.workers[it->second].times.push_back(*time);
  }
  for (WorkerStepTimes& w : table.workers) SortByStep(w);
  std::stable_sort(table.workers.begin(), table.workers.end(),
                   [](const WorkerStepTimes& a, const WorkerStepTimes& b) { return NaturalLess(a.worker, b.worker); });
  return table;
}

absl::StatusOr<StepTimesTable> ParseWide(const Header& header, const std::vector<TextLine>& rows,
                                         char delimiter, absl::string_view source) {
  int step_col = -1;
  for (size_t i = 0; i < header.normalized.size(); ++i) {
    if (IsStepAlias(header.normalized[i])) {
      step_col = static_cast<int>(i);
      break;
    }
  }
  StepTimesTable table;
  table.format = StepTableFormat::kWide;
  std::vector<int> worker_cols;
  std::map<std::string, int> names;
  for (size_t i = 0; i < header.names.size(); ++i) {
    if (static_cast<int>(i) == step_col) continue;
    const std::string& name = header.names[i];
    if (name.empty()) {
      return LineError(source, header.line,
                       absl::StrCat("column ", i + 1, " of the header has no worker name"));
    }
    if (auto [it, fresh] = names.emplace(name, static_cast<int>(i)); !fresh) {
      return LineError(source, header.line,
                       absl::StrCat("worker column '", name, "' appears twice (columns ",
                                    it->second + 1, " and ", i + 1, ")"));
    }
    worker_cols.push_back(static_cast<int>(i));
    table.workers.push_back({name, {}, {}});
  }
  if (worker_cols.empty()) {
    return LineError(source, header.line, "wide format needs at least one worker column");
  }
  std::map<int64_t, int> seen_steps;
  int64_t next_step = 0;
  for (const TextLine& row : rows) {
    absl::StatusOr<std::vector<std::string>> fields = SplitRow(header, row, delimiter, source);
    if (!fields.ok()) return fields.status();
    int64_t step = next_step++;
    if (step_col >= 0) {
      absl::StatusOr<int64_t> s =
          ParseStep((*fields)[step_col], header.names[step_col], source, row.number);
      if (!s.ok()) return s.status();
      step = *s;
      if (auto [it, fresh] = seen_steps.emplace(step, row.number); !fresh) {
        return LineError(source, row.number, absl::StrCat("step ", step, " appears twice (first on line ",
                                                          it->second, ")"));
      }
    }
    for (size_t w = 0; w < worker_cols.size(); ++w) {
      const std::string& cell = (*fields)[worker_cols[w]];
      if (cell.empty()) continue;
      absl::StatusOr<double> time = ParseTime(cell, header.names[worker_cols[w]], source, row.number);
      if (!time.ok()) return time.status();
      table.workers[w].steps.push_back(step);
      table.workers[w].times.push_back(*time);
    }
  }
  for (WorkerStepTimes& w : table.workers) SortByStep(w);
  return table;
}

}  // namespace

const char* StepTableFormatName(StepTableFormat format) {
  switch (format) {
    case StepTableFormat::kAuto: return "auto";
    case StepTableFormat::kLong: return "long";
    case StepTableFormat::kWide: return "wide";
  }
  return "?";
}

absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 StepTableFormat format) {
  if (absl::Status s = analyze_internal::CheckText(text, source); !s.ok()) return s;
  std::vector<TextLine> lines;
  for (const TextLine& line : SplitLines(text)) {
    const absl::string_view t = absl::StripAsciiWhitespace(line.text);
    if (t.empty() || t[0] == '#') continue;
    lines.push_back(line);
  }
  if (lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no header line (only comments)"));
  }
  Header header;
  header.line = lines[0].number;
  const char delimiter = DetectDelimiter(lines[0].text);
  absl::StatusOr<std::vector<std::string>> names =
      SplitRecord(lines[0].text, delimiter, source, header.line);
  if (!names.ok()) return names.status();
  header.names = *names;
  bool any_numeric_header = false;
  for (const std::string& n : header.names) {
    header.normalized.push_back(NormalizeHeader(n));
    double ignored;
    any_numeric_header |= absl::SimpleAtod(n, &ignored);
  }
  if (format == StepTableFormat::kAuto) {
    bool has_worker = false, has_time = false;
    for (const std::string& h : header.normalized) {
      has_worker |= IsWorkerAlias(h);
      has_time |= TimeAliasUnit(h).has_value();
    }
    format = has_worker && has_time ? StepTableFormat::kLong : StepTableFormat::kWide;
    if (format == StepTableFormat::kWide && any_numeric_header) {
      return LineError(source, header.line,
                       absl::StrCat("expected a header line naming the columns (e.g. "
                                    "'worker,step,seconds', or one name per worker), got: ",
                                    Excerpt(lines[0].text)));
    }
  }
  std::vector<TextLine> rows(lines.begin() + 1, lines.end());
  if (rows.empty()) {
    return LineError(source, header.line, "header only: the file has no data rows");
  }
  if (format == StepTableFormat::kLong) return ParseLong(header, rows, delimiter, source);
  return ParseWide(header, rows, delimiter, source);
}

}  // namespace peregrine
