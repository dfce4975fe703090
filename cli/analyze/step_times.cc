#include "cli/analyze/step_times.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cli/analyze/step_columns.h"
#include "cli/analyze/step_table_builder.h"
#include "cli/analyze/text_input.h"

namespace peregrine {
namespace {

using analyze_internal::DetectDelimiter;
using analyze_internal::Excerpt;
using analyze_internal::IsStepAlias;
using analyze_internal::IsWorkerAlias;
using analyze_internal::NormalizeHeader;
using analyze_internal::ParseStep;
using analyze_internal::ParseTime;
using analyze_internal::SplitRecord;
using analyze_internal::TimeAliasUnit;
using analyze_internal::TimeColumnUnit;
using analyze_internal::UnitFromName;
using analyze_internal::SplitLines;
using analyze_internal::StepLineError;
using analyze_internal::StepTableBuilder;
using analyze_internal::TextLine;


struct Header {
  int line = 0;
  std::vector<std::string> names;       // as written ("column N" when the file has none)
  std::vector<std::string> normalized;  // NormalizeHeader
  std::vector<bool> is_time;            // TimeColumnUnit is not empty

  void Add(std::string name) {
    normalized.push_back(NormalizeHeader(name));
    is_time.push_back(!TimeColumnUnit(name).empty());
    names.push_back(std::move(name));
  }
};

bool IsIndex(const std::string& spec) {
  return !spec.empty() && std::all_of(spec.begin(), spec.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// The column `spec` names (-1 when `spec` is empty): a 1-based index, else a header name
// compared case-insensitively, else compared as NormalizeHeader does.
absl::StatusOr<int> ResolveColumn(const Header& h, const std::string& spec, absl::string_view flag,
                                  absl::string_view source) {
  if (spec.empty()) return -1;
  const std::string columns = absl::StrJoin(h.names, ", ");
  if (IsIndex(spec)) {
    int index = 0;
    if (!absl::SimpleAtoi(spec, &index) || index < 1 || index > static_cast<int>(h.names.size())) {
      return StepLineError(source, h.line,
                           absl::StrCat(flag, " ", Excerpt(spec), ": no such column; there are ", h.names.size(),
                                        " (1-based): ", columns));
    }
    return index - 1;
  }
  for (size_t i = 0; i < h.names.size(); ++i) {
    if (absl::EqualsIgnoreCase(h.names[i], absl::StripAsciiWhitespace(spec))) return static_cast<int>(i);
  }
  const std::string n = NormalizeHeader(spec);
  for (size_t i = 0; i < h.names.size() && !n.empty(); ++i) {
    if (h.normalized[i] == n) return static_cast<int>(i);
  }
  return StepLineError(source, h.line,
                       absl::StrCat(flag, " '", Excerpt(spec), "': no such column; the header's columns: ", columns));
}

int FindAlias(const Header& h, bool (*alias)(const std::string&), const std::vector<int>& taken) {
  for (size_t i = 0; i < h.normalized.size(); ++i) {
    const int c = static_cast<int>(i);
    if (alias(h.normalized[i]) && std::find(taken.begin(), taken.end(), c) == taken.end()) return c;
  }
  return -1;
}

int FindTimeColumn(const Header& h, const std::vector<int>& taken) {
  for (size_t i = 0; i < h.is_time.size(); ++i) {
    const int c = static_cast<int>(i);
    if (h.is_time[i] && std::find(taken.begin(), taken.end(), c) == taken.end()) return c;
  }
  return -1;
}

// The long layout's columns: named by the options, else found among the aliases.
struct LongColumns {
  int worker = -1, step = -1, time = -1;
  std::string unit;  // "" when neither the options nor the time column's name give it
  std::vector<std::string> notes;
};

std::string BaseName(absl::string_view source) {
  const size_t slash = source.find_last_of('/');
  return std::string(slash == absl::string_view::npos ? source : source.substr(slash + 1));
}

absl::StatusOr<LongColumns> ResolveLong(const Header& h, const StepTableOptions& options, absl::string_view source) {
  LongColumns c;
  absl::StatusOr<int> worker = ResolveColumn(h, options.worker_column, "--worker-col", source);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<int> step = ResolveColumn(h, options.step_column, "--step-col", source);
  if (!step.ok()) return step.status();
  absl::StatusOr<int> time = ResolveColumn(h, options.time_column, "--time-col", source);
  if (!time.ok()) return time.status();
  c.worker = *worker;
  c.step = *step;
  c.time = *time;
  if (c.time < 0) c.time = FindTimeColumn(h, {c.worker, c.step});
  if (c.worker < 0 && options.worker_column.empty()) c.worker = FindAlias(h, IsWorkerAlias, {c.step, c.time});
  if (c.step < 0 && options.step_column.empty()) c.step = FindAlias(h, IsStepAlias, {c.worker, c.time});
  if (c.time < 0) {
    return StepLineError(source, h.line,
                         absl::StrCat("long format needs a time column (seconds, time, duration, iter_ms, "
                                      "duration_ms, ...; or name it with --time-col); the header has: ",
                                      absl::StrJoin(h.names, ", ")));
  }
  if (c.worker == c.step && c.worker >= 0) {
    return StepLineError(source, h.line, absl::StrCat("the worker and step columns are both column ", c.worker + 1));
  }
  if (c.time == c.worker || c.time == c.step) {
    return StepLineError(source, h.line,
                         absl::StrCat("the time column '", h.names[c.time], "' is also the worker or step column"));
  }
  const std::string& time_name = h.names[c.time];
  c.unit = options.unit;
  if (c.unit.empty()) c.unit = TimeColumnUnit(time_name);
  if (c.unit.empty()) c.unit = UnitFromName(time_name);
  if (c.unit.empty()) {
    c.notes.push_back(absl::StrCat("the name of the time column '", time_name,
                                   "' gives no unit: times are as written (name it with --unit s|ms|us|ns|min)"));
  }
  if (c.worker < 0) {
    c.notes.push_back(absl::StrCat("no worker column: one series, named '", BaseName(source),
                                   "' (name a column with --worker-col)"));
  }
  if (c.step < 0) {
    c.notes.push_back("no step column: each worker's rows are numbered 0, 1, 2, ... in file order "
                      "(name a column with --step-col)");
  }
  return c;
}

absl::StatusOr<StepTimesTable> ParseLong(const Header& header, const std::vector<TextLine>& rows, char delimiter,
                                         const StepTableOptions& options, absl::string_view source) {
  absl::StatusOr<LongColumns> cols = ResolveLong(header, options, source);
  if (!cols.ok()) return cols.status();
  StepTableBuilder builder(source, options.strict);
  const std::string single = BaseName(source);
  std::map<size_t, int64_t> next_step;  // per worker, when rows are numbered
  for (const TextLine& row : rows) {
    absl::StatusOr<std::vector<std::string>> fields = SplitRecord(row.text, delimiter);
    absl::Status bad;
    if (!fields.ok()) {
      bad = fields.status();
    } else if (fields->size() != header.names.size()) {
      bad = absl::InvalidArgumentError(absl::StrCat("expected ", header.names.size(),
                                                    " fields as in the header, found ", fields->size(), ": ",
                                                    Excerpt(row.text)));
    }
    std::string worker = single;
    absl::StatusOr<int64_t> step = int64_t{0};
    absl::StatusOr<double> time = 0.0;
    if (bad.ok() && cols->worker >= 0) {
      worker = (*fields)[cols->worker];
      if (worker.empty()) bad = absl::InvalidArgumentError(absl::StrCat("column '", header.names[cols->worker], "' is empty"));
    }
    if (bad.ok() && cols->step >= 0) {
      step = ParseStep((*fields)[cols->step], header.names[cols->step]);
      bad = step.status();
    }
    if (bad.ok()) {
      time = ParseTime((*fields)[cols->time], header.names[cols->time]);
      bad = time.status();
    }
    if (!bad.ok()) {
      if (absl::Status s = builder.SkipRow(row.number, bad.message()); !s.ok()) return s;
      continue;
    }
    const size_t w = builder.Worker(worker);
    const int64_t number = cols->step >= 0 ? *step : next_step[w]++;
    if (absl::Status s = builder.AddRow(row.number, {{w, number, *time}}); !s.ok()) return s;
  }
  absl::StatusOr<StepTimesTable> t =
      builder.Finish(StepTableFormat::kLong, true, cols->unit, SecondsPerUnit(cols->unit), cols->notes);
  if (t.ok()) t->steps_numbered = cols->step < 0;
  return t;
}

absl::StatusOr<StepTimesTable> ParseWide(const Header& header, const std::vector<TextLine>& rows, char delimiter,
                                         const StepTableOptions& options, absl::string_view source) {
  if (!options.worker_column.empty() || !options.time_column.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": --worker-col and --time-col name columns of the long layout; a wide table has one column "
                "per worker"));
  }
  absl::StatusOr<int> step_col = ResolveColumn(header, options.step_column, "--step-col", source);
  if (!step_col.ok()) return step_col.status();
  if (*step_col < 0 && options.step_column.empty()) step_col = FindAlias(header, IsStepAlias, {});
  std::vector<std::string> notes;
  std::vector<int> worker_cols;
  std::vector<std::string> envelope;
  std::map<std::string, int> names;
  StepTableBuilder builder(source, options.strict);
  for (size_t i = 0; i < header.names.size(); ++i) {
    if (static_cast<int>(i) == *step_col) continue;
    const std::string& name = header.names[i];
    if (absl::EndsWith(name, "__MIN") || absl::EndsWith(name, "__MAX")) {
      envelope.push_back(name);
      continue;
    }
    if (name.empty()) {
      return StepLineError(source, header.line, absl::StrCat("column ", i + 1, " of the header has no worker name"));
    }
    if (auto [it, fresh] = names.emplace(name, static_cast<int>(i)); !fresh) {
      return StepLineError(source, header.line,
                           absl::StrCat("worker column '", name, "' appears twice (columns ", it->second + 1, " and ",
                                        i + 1, ")"));
    }
    worker_cols.push_back(static_cast<int>(i));
    builder.Worker(name);
  }
  if (worker_cols.empty()) return StepLineError(source, header.line, "wide format needs at least one worker column");
  if (!envelope.empty()) {
    notes.push_back(absl::StrCat("ignored ", envelope.size(),
                                 " min/max envelope column(s) of a chart export: ", absl::StrJoin(envelope, ", ")));
  }
  if (*step_col < 0) notes.push_back("no step column: rows are steps 0, 1, 2, ... in file order");
  // The unit: --unit, else the one unit word every worker column ends with ("gpu0_ms").
  std::string unit = options.unit;
  if (unit.empty()) {
    unit = UnitFromName(header.names[worker_cols.front()]);
    for (int c : worker_cols) {
      if (UnitFromName(header.names[c]) != unit) unit.clear();
    }
  }
  if (unit.empty()) {
    notes.push_back("a wide table does not name its unit: times are as written (name it with --unit s|ms|us|ns|min)");
  }
  int64_t next_step = 0;
  for (const TextLine& row : rows) {
    int64_t step = next_step++;
    absl::StatusOr<std::vector<std::string>> fields = SplitRecord(row.text, delimiter);
    absl::Status bad = fields.status();
    if (bad.ok() && fields->size() != header.names.size()) {
      bad = absl::InvalidArgumentError(absl::StrCat("expected ", header.names.size(),
                                                    " fields as in the header, found ", fields->size(), ": ",
                                                    Excerpt(row.text)));
    }
    if (bad.ok() && *step_col >= 0) {
      absl::StatusOr<int64_t> s = ParseStep((*fields)[*step_col], header.names[*step_col]);
      bad = s.status();
      if (s.ok()) step = *s;
    }
    if (!bad.ok()) {
      if (absl::Status s = builder.SkipRow(row.number, bad.message()); !s.ok()) return s;
      continue;
    }
    std::vector<StepTableBuilder::Cell> cells;
    for (size_t w = 0; w < worker_cols.size(); ++w) {
      const std::string& cell = (*fields)[worker_cols[w]];
      if (cell.empty()) continue;
      absl::StatusOr<double> time = ParseTime(cell, header.names[worker_cols[w]]);
      if (!time.ok()) {
        if (absl::Status s = builder.SkipCell(row.number, time.status().message()); !s.ok()) return s;
        continue;
      }
      cells.push_back({w, step, *time});
    }
    if (absl::Status s = builder.AddRow(row.number, cells); !s.ok()) return s;
  }
  absl::StatusOr<StepTimesTable> t =
      builder.Finish(StepTableFormat::kWide, false, unit, SecondsPerUnit(unit), notes);
  if (t.ok()) t->steps_numbered = *step_col < 0;
  return t;
}

// One JSON value as a cell's text: strings as they are, numbers as written.
std::optional<std::string> JsonCell(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float()) return v.dump();
  return std::nullopt;
}

// JSON lines: the first object's keys play the header; each line is then a long row.
absl::StatusOr<StepTimesTable> ParseJsonLines(const std::vector<TextLine>& lines, const StepTableOptions& options,
                                              absl::string_view source) {
  using Json = nlohmann::ordered_json;
  if (IsIndex(options.worker_column) || IsIndex(options.step_column) || IsIndex(options.time_column)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": JSON lines have no column order: name their keys, not indexes"));
  }
  StepTableBuilder builder(source, options.strict);
  std::optional<Header> header;
  std::optional<LongColumns> cols;
  const std::string single = BaseName(source);
  std::map<size_t, int64_t> next_step;
  for (const TextLine& line : lines) {
    Json j;
    std::string bad;
    try {
      j = Json::parse(line.text.begin(), line.text.end());
      if (!j.is_object()) bad = absl::StrCat("not a JSON object: ", Excerpt(line.text));
    } catch (const Json::exception& e) {  // parse errors, numbers out of range
      bad = absl::StrCat("not JSON: ", Excerpt(line.text));
    }
    if (bad.empty() && !header) {
      header.emplace();
      header->line = line.number;
      for (const auto& [key, value] : j.items()) header->Add(key);
      absl::StatusOr<LongColumns> c = ResolveLong(*header, options, source);
      if (!c.ok()) return c.status();
      cols = std::move(*c);
    }
    std::string worker = single;
    absl::StatusOr<int64_t> step = int64_t{0};
    absl::StatusOr<double> time = 0.0;
    auto cell = [&](int col) -> std::optional<std::string> {
      auto it = j.find(header->names[col]);
      if (it == j.end()) {
        bad = absl::StrCat("no key '", header->names[col], "'");
        return std::nullopt;
      }
      std::optional<std::string> text = JsonCell(*it);
      if (!text) bad = absl::StrCat("key '", header->names[col], "': not a string or number: ", Excerpt(it->dump()));
      return text;
    };
    if (bad.empty() && cols->worker >= 0) {
      if (auto w = cell(cols->worker)) {
        worker = *w;
        if (worker.empty()) bad = absl::StrCat("key '", header->names[cols->worker], "' is empty");
      }
    }
    if (bad.empty() && cols->step >= 0) {
      if (auto s = cell(cols->step)) {
        step = ParseStep(*s, header->names[cols->step]);
        if (!step.ok()) bad = std::string(step.status().message());
      }
    }
    if (bad.empty()) {
      if (auto t = cell(cols->time)) {
        time = ParseTime(*t, header->names[cols->time]);
        if (!time.ok()) bad = std::string(time.status().message());
      }
    }
    if (!bad.empty()) {
      if (absl::Status s = builder.SkipRow(line.number, bad); !s.ok()) return s;
      continue;
    }
    const size_t w = builder.Worker(worker);
    const int64_t number = cols->step >= 0 ? *step : next_step[w]++;
    if (absl::Status s = builder.AddRow(line.number, {{w, number, *time}}); !s.ok()) return s;
  }
  const std::string unit = cols ? cols->unit : std::string();
  absl::StatusOr<StepTimesTable> t = builder.Finish(StepTableFormat::kLong, true, unit, SecondsPerUnit(unit),
                                                    cols ? cols->notes : std::vector<std::string>{});
  if (t.ok()) t->steps_numbered = cols && cols->step < 0;
  return t;
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

double SecondsPerUnit(absl::string_view unit) {
  if (unit == "s") return 1.0;
  if (unit == "ms") return 1e-3;
  if (unit == "us") return 1e-6;
  if (unit == "ns") return 1e-9;
  if (unit == "min") return 60.0;
  return 0.0;
}

absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 StepTableFormat format) {
  StepTableOptions options;
  options.format = format;
  return ParseStepTimesCsv(text, source, options);
}

absl::StatusOr<StepTimesTable> ParseStepTimesCsv(absl::string_view text, absl::string_view source,
                                                 const StepTableOptions& options) {
  if (!options.unit.empty() && SecondsPerUnit(options.unit) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unit '", Excerpt(options.unit), "' is not one of ", absl::StrJoin(kStepTimeUnits, ", ")));
  }
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");  // a UTF-8 byte-order mark
  if (absl::Status s = analyze_internal::CheckText(text, source); !s.ok()) return s;
  std::vector<TextLine> lines;
  for (const TextLine& line : SplitLines(text)) {
    const absl::string_view t = absl::StripAsciiWhitespace(line.text);
    if (t.empty() || t[0] == '#') continue;
    lines.push_back(line);
  }
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no header line (only comments)"));
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[0].text), "{")) {
    if (options.format == StepTableFormat::kWide) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": JSON lines are one row per step: not a wide table"));
    }
    return ParseJsonLines(lines, options, source);
  }
  Header header;
  header.line = lines[0].number;
  const char delimiter = DetectDelimiter(lines[0].text);
  absl::StatusOr<std::vector<std::string>> names = SplitRecord(lines[0].text, delimiter);
  if (!names.ok()) return StepLineError(source, header.line, names.status().message());
  // A first line with a number and no column alias is data: a header-less file.
  bool numeric = false, alias = false;
  for (const std::string& n : *names) {
    double ignored;
    numeric |= absl::SimpleAtod(n, &ignored);
    const std::string h = NormalizeHeader(n);
    alias |= IsWorkerAlias(h) || IsStepAlias(h) || !TimeColumnUnit(n).empty();
  }
  size_t first_row = 1;
  if (numeric && !alias) {
    const bool by_index = IsIndex(options.worker_column) || IsIndex(options.step_column) ||
                          IsIndex(options.time_column);
    const bool by_name = (!options.worker_column.empty() && !IsIndex(options.worker_column)) ||
                         (!options.step_column.empty() && !IsIndex(options.step_column)) ||
                         (!options.time_column.empty() && !IsIndex(options.time_column));
    if (!by_index || by_name) {
      return StepLineError(
          source, header.line,
          absl::StrCat("no header line: the first line is data (", Excerpt(lines[0].text),
                       "); add a header naming the columns (e.g. 'worker,step,seconds', or one name per worker), "
                       "or name the columns by 1-based index: --worker-col 1 --step-col 2 --time-col 3"));
    }
    for (size_t i = 0; i < names->size(); ++i) header.Add(absl::StrCat("column ", i + 1));
    first_row = 0;
  } else {
    for (const std::string& n : *names) header.Add(n);
  }
  StepTableFormat format = options.format;
  if (format == StepTableFormat::kAuto) {
    // Long when a time column is named, or is an alias, or is the only column named like one
    // (several, as in "step,gpu0_time_ms,gpu1_time_ms", are a wide table's workers).
    int aliases = 0, timeish = 0;
    for (size_t i = 0; i < header.names.size(); ++i) {
      aliases += TimeAliasUnit(header.normalized[i]).has_value() ? 1 : 0;
      timeish += header.is_time[i] ? 1 : 0;
    }
    const bool has_time = !options.time_column.empty() || !options.worker_column.empty() || aliases > 0 ||
                          timeish == 1;
    format = has_time ? StepTableFormat::kLong : StepTableFormat::kWide;
  }
  std::vector<TextLine> rows(lines.begin() + static_cast<std::ptrdiff_t>(first_row), lines.end());
  if (rows.empty()) return StepLineError(source, header.line, "header only: the file has no data rows");
  if (format == StepTableFormat::kLong) return ParseLong(header, rows, delimiter, options, source);
  return ParseWide(header, rows, delimiter, options, source);
}

std::string ReadableStepTimeUnit(const StepTimesTable& table) {
  if (table.unit != "s") return table.unit;
  std::vector<double> all;
  for (const WorkerStepTimes& w : table.workers) all.insert(all.end(), w.times.begin(), w.times.end());
  if (all.empty()) return "s";
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2), all.end());
  const double median = all[all.size() / 2];
  if (median >= 1.0) return "s";
  if (median >= 1e-3) return "ms";
  return median > 0 ? "us" : "s";
}

void ConvertStepTimes(StepTimesTable& table, absl::string_view unit) {
  const double per = SecondsPerUnit(unit);
  if (table.unit != "s" || per == 0 || unit == "s") return;
  for (WorkerStepTimes& w : table.workers) {
    for (double& t : w.times) t /= per;
  }
  table.unit = std::string(unit);
}

}  // namespace peregrine
