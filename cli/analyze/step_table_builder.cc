#include "cli/analyze/step_table_builder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine::analyze_internal {
namespace {

// How many reasons or examples of each kind the warnings quote.
constexpr size_t kExamples = 5;

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
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w.steps[a] < w.steps[b]; });
  WorkerStepTimes sorted{w.worker, {}, {}};
  for (size_t i : order) {
    sorted.steps.push_back(w.steps[i]);
    sorted.times.push_back(w.times[i]);
  }
  w = std::move(sorted);
}

// "N thing(s) ...: a; b; c (and M more)".
std::string Listed(int64_t count, absl::string_view what, const std::vector<std::string>& examples) {
  std::string s = absl::StrCat(count, " ", what, ": ", absl::StrJoin(examples, "; "));
  if (count > static_cast<int64_t>(examples.size())) {
    absl::StrAppend(&s, " (and ", count - static_cast<int64_t>(examples.size()), " more)");
  }
  return s;
}

}  // namespace

absl::Status StepLineError(absl::string_view source, int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", message));
}

size_t StepTableBuilder::Worker(const std::string& worker) {
  auto [it, fresh] = index_.emplace(worker, workers_.size());
  if (fresh) workers_.push_back({worker, {}, {}});
  return it->second;
}

absl::Status StepTableBuilder::SkipRow(int line, absl::string_view reason) {
  if (strict_) return StepLineError(source_, line, reason);
  ++skipped_rows_;
  if (skip_reasons_.size() < kExamples) skip_reasons_.push_back(absl::StrCat(source_, ":", line, ": ", reason));
  return absl::OkStatus();
}

absl::Status StepTableBuilder::SkipCell(int line, absl::string_view reason) {
  if (strict_) return StepLineError(source_, line, reason);
  ++skipped_cells_;
  if (cell_reasons_.size() < kExamples) cell_reasons_.push_back(absl::StrCat(source_, ":", line, ": ", reason));
  return absl::OkStatus();
}

absl::Status StepTableBuilder::AddRow(int line, const std::vector<Cell>& cells) {
  // First pass: classify, so that a strict error or a duplicate row adds nothing twice.
  bool exact = false;
  const Cell* conflict = nullptr;
  std::pair<int, double> first{0, 0};
  for (const Cell& c : cells) {
    auto it = seen_.find({c.worker, c.step});
    if (it == seen_.end()) continue;
    if (it->second.second == c.time) {
      if (!exact && conflict == nullptr) first = it->second;
      exact = true;
    } else if (conflict == nullptr) {
      conflict = &c;
      first = it->second;
    }
  }
  if (exact || conflict != nullptr) {
    const Cell& c = conflict != nullptr ? *conflict : cells.front();
    const std::string& worker = workers_[c.worker].worker;
    if (strict_) {
      return StepLineError(source_, line,
                           absl::StrCat("worker '", worker, "' step ", c.step, " appears twice (first on line ",
                                        first.first, ")"));
    }
    if (conflict != nullptr) {
      ++conflicting_;
      if (conflict_examples_.size() < kExamples) {
        conflict_examples_.push_back(absl::StrCat("line ", line, " has worker '", worker, "' step ", c.step,
                                                  " with time ", c.time, ", line ", first.first, " had ",
                                                  first.second));
      }
    } else {
      ++exact_;
      if (exact_examples_.size() < kExamples) {
        exact_examples_.push_back(absl::StrCat("line ", line, " repeats line ", first.first));
      }
    }
  }
  for (const Cell& c : cells) {
    if (!seen_.emplace(std::make_pair(c.worker, c.step), std::make_pair(line, c.time)).second) continue;
    workers_[c.worker].steps.push_back(c.step);
    workers_[c.worker].times.push_back(c.time);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTimesTable> StepTableBuilder::Finish(StepTableFormat format, bool sort_workers,
                                                        const std::string& source_unit,
                                                        double seconds_per_unit,
                                                        std::vector<std::string> notes) {
  StepTimesTable table;
  table.format = format;
  table.source_unit = source_unit;
  if (seconds_per_unit > 0) table.unit = std::string(1, 's');
  table.skipped_rows = skipped_rows_;
  table.skipped_cells = skipped_cells_;
  table.duplicate_rows = exact_ + conflicting_;
  table.conflicting_rows = conflicting_;
  if (seen_.empty()) {
    std::string why = skipped_rows_ + skipped_cells_ > 0
                          ? absl::StrCat(": ", skipped_rows_, " row(s) and ", skipped_cells_,
                                         " cell(s) could not be read; first: ",
                                         skip_reasons_.empty() ? cell_reasons_.front() : skip_reasons_.front())
                          : std::string(" (every cell is empty)");
    return absl::InvalidArgumentError(absl::StrCat(source_, ": no usable step time", why));
  }
  table.workers = std::move(workers_);
  for (WorkerStepTimes& w : table.workers) {
    if (seconds_per_unit > 0) {
      for (double& t : w.times) t *= seconds_per_unit;
    }
    SortByStep(w);
  }
  if (sort_workers) {
    std::stable_sort(table.workers.begin(), table.workers.end(),
                     [](const WorkerStepTimes& a, const WorkerStepTimes& b) { return NaturalLess(a.worker, b.worker); });
  }
  // Stride: the most common difference between consecutive logged steps, when at least
  // half of the differences are that one (sampled logging: every k-th step).
  std::map<int64_t, int64_t> diffs;
  int64_t total = 0;
  for (const WorkerStepTimes& w : table.workers) {
    for (size_t i = 1; i < w.steps.size(); ++i) {
      int64_t d = 0;
      // A difference beyond int64 (steps near both ends of the range) shares no stride.
      ++diffs[__builtin_sub_overflow(w.steps[i], w.steps[i - 1], &d) ? int64_t{-1} : d];
      ++total;
    }
  }
  int64_t mode = 0, mode_count = 0;
  for (const auto& [d, n] : diffs) {
    if (d > 0 && n > mode_count) std::tie(mode, mode_count) = std::make_pair(d, n);
  }
  if (total > 0 && 2 * mode_count >= total) {
    table.step_stride = mode;
    table.step_gaps = total - mode_count;
  }
  table.warnings = std::move(notes);
  if (table.step_stride > 1) {
    table.warnings.push_back(absl::StrCat("steps advance by ", table.step_stride, " (one step in every ",
                                          table.step_stride, " logged); steps are reported as written"));
  }
  if (table.step_gaps > 0) {
    table.warnings.push_back(absl::StrCat(table.step_gaps, " gap(s) where consecutive logged steps are not ",
                                          table.step_stride, " apart"));
  } else if (table.step_stride == 0 && total > 0) {
    table.warnings.push_back("steps advance irregularly (no common difference between consecutive steps)");
  }
  if (skipped_rows_ > 0) table.warnings.push_back(Listed(skipped_rows_, "row(s) skipped", skip_reasons_));
  if (skipped_cells_ > 0) table.warnings.push_back(Listed(skipped_cells_, "cell(s) skipped", cell_reasons_));
  if (exact_ > 0) {
    table.warnings.push_back(
        Listed(exact_, "exact duplicate row(s) dropped (same worker, step and time)", exact_examples_));
  }
  if (conflicting_ > 0) {
    table.warnings.push_back(Listed(
        conflicting_, "conflicting duplicate row(s) dropped (same worker and step, another time; the first kept)",
        conflict_examples_));
  }
  return table;
}

}  // namespace peregrine::analyze_internal
