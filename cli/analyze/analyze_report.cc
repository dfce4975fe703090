#include "cli/analyze/analyze_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace peregrine {
namespace {

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Quantile(v, 0.5);
}

std::string CallText(const NcclCallRecord& r) {
  return absl::StrFormat("%s comm=0x%x count=%d dtype=%d", NcclOpName(r.op), r.comm_id, r.count, r.datatype);
}

}  // namespace

SummaryStats Summarize(absl::Span<const double> values) {
  SummaryStats s;
  if (values.empty()) return s;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  s.count = static_cast<int64_t>(sorted.size());
  double sum = 0;
  for (double v : sorted) sum += v;
  s.mean = sum / static_cast<double>(sorted.size());
  double ss = 0;
  for (double v : sorted) ss += (v - s.mean) * (v - s.mean);
  s.stddev = sorted.size() > 1 ? std::sqrt(ss / static_cast<double>(sorted.size() - 1)) : 0.0;
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = Quantile(sorted, 0.5);
  s.p5 = Quantile(sorted, 0.05);
  s.p95 = Quantile(sorted, 0.95);
  return s;
}

absl::StatusOr<ChangeAnalysis> AnalyzeChanges(absl::Span<const int64_t> steps,
                                              absl::Span<const double> times,
                                              const ChangeOptions& options) {
  if (steps.size() != times.size()) {
    return absl::InvalidArgumentError("steps and times differ in length");
  }
  if (!(options.verify_threshold > 0 && options.verify_threshold < 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--verify must be in (0, 10), got ", options.verify_threshold));
  }
  if (!(options.report_threshold > 0 && options.report_threshold < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prob must be in (0, 1), got ", options.report_threshold));
  }
  FailSlowDetectorOptions o;
  o.verify_threshold = options.verify_threshold;
  o.bocd.report_threshold = options.report_threshold;
  absl::StatusOr<FailSlowDetector> detector = FailSlowDetector::Create(o);
  if (!detector.ok()) return detector.status();
  // The detector counts finite samples only; map its indexes back to steps.
  std::vector<int64_t> index_to_step;
  std::vector<FailSlowEvent> events;
  for (size_t i = 0; i < times.size(); ++i) {
    if (!std::isfinite(times[i])) continue;
    index_to_step.push_back(steps[i]);
    FailSlowUpdate u = detector->Update(times[i]);
    events.insert(events.end(), u.events.begin(), u.events.end());
  }
  auto step_of = [&](int64_t index) {
    if (index_to_step.empty()) return int64_t{0};
    index = std::clamp<int64_t>(index, 0, static_cast<int64_t>(index_to_step.size()) - 1);
    return index_to_step[static_cast<size_t>(index)];
  };
  ChangeAnalysis a;
  a.rejected_change_points = detector->stats().rejected;
  std::optional<SlowdownEpisode> open;
  for (const FailSlowEvent& e : events) {
    StepChange c;
    c.kind = e.kind;
    c.step = step_of(e.index);
    c.confirmed_step = step_of(e.confirmed_at);
    c.posterior = e.posterior;
    c.mean_before = e.mean_before;
    c.mean_after = e.mean_after;
    c.relative_change = e.relative_change;
    c.severity = e.severity;
    a.changes.push_back(c);
    switch (e.kind) {
      case FailSlowEventKind::kSlowdownStart:
        open = SlowdownEpisode{c.step, std::nullopt, e.severity};
        break;
      case FailSlowEventKind::kLevelShift:
        if (open) open->severity = std::max(open->severity, e.severity);
        break;
      case FailSlowEventKind::kSlowdownEnd:
        if (open) {
          open->end_step = c.step;
          a.episodes.push_back(*open);
          open.reset();
        }
        break;
    }
  }
  if (open) a.episodes.push_back(*open);
  return a;
}

absl::StatusOr<StepsReport> AnalyzeStepTimes(const StepTimesTable& table, const StepsOptions& options) {
  if (!(options.peer_ratio > 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("peer ratio must be > 1, got ", options.peer_ratio));
  }
  StepsReport report;
  report.format = table.format;
  report.unit = table.unit;
  report.peer_ratio = options.peer_ratio;
  std::vector<double> medians;
  for (const WorkerStepTimes& w : table.workers) {
    WorkerAnalysis a;
    a.worker = w.worker;
    if (!w.steps.empty()) {
      a.first_step = w.steps.front();
      a.last_step = w.steps.back();
    }
    a.stats = Summarize(w.times);
    absl::StatusOr<ChangeAnalysis> change = AnalyzeChanges(w.steps, w.times, options.change);
    if (!change.ok()) return change.status();
    a.change = std::move(*change);
    if (a.stats.count > 0) medians.push_back(a.stats.median);
    if (a.stats.count < 30) {
      report.notes.push_back(absl::StrCat("worker '", w.worker, "' has only ", a.stats.count,
                                          " steps; change points need ~30 or more"));
    }
    report.workers.push_back(std::move(a));
  }
  report.median_of_medians = medians.empty() ? 0.0 : Median(medians);
  if (medians.size() < 2) {
    report.notes.push_back("one worker only: the peer comparison needs at least two");
  }
  for (WorkerAnalysis& a : report.workers) {
    if (report.median_of_medians > 0) a.ratio_to_peers = a.stats.median / report.median_of_medians;
    a.persistently_slow = medians.size() >= 2 && a.stats.count > 0 &&
                          a.stats.median > options.peer_ratio * report.median_of_medians;
    if (a.persistently_slow) report.persistently_slow.push_back(a.worker);
    if (!a.change.episodes.empty()) report.with_slowdowns.push_back(a.worker);
  }
  return report;
}

absl::StatusOr<NcclReport> AnalyzeNcclTrace(const NcclTrace& trace, std::optional<int> rank,
                                            const ChangeOptions& options) {
  NcclReport report;
  report.format = trace.format;
  report.notes = trace.notes;
  std::vector<const NcclCallStream*> selected;
  if (rank) {
    bool any_known = false;
    std::vector<std::string> present;
    for (const NcclCallStream& s : trace.streams) {
      any_known |= s.rank >= 0;
      if (s.rank >= 0) present.push_back(absl::StrCat(s.rank));
      if (s.rank == *rank) selected.push_back(&s);
    }
    if (!any_known && *rank >= 0 && *rank < static_cast<int>(trace.streams.size())) {
      selected.push_back(&trace.streams[static_cast<size_t>(*rank)]);
    }
    if (selected.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no calls of rank ", *rank, " in the input; ",
          any_known ? absl::StrCat("ranks present: ", absl::StrJoin(present, ", "))
                    : absl::StrCat(trace.streams.size(), " stream(s) of unknown rank, numbered from 0")));
    }
  } else {
    for (const NcclCallStream& s : trace.streams) selected.push_back(&s);
  }
  for (const NcclCallStream* s : selected) {
    NcclStreamAnalysis a;
    a.label = s->label;
    a.rank = s->rank;
    a.calls = static_cast<int64_t>(s->calls.size());
    {
      std::unordered_set<CallSignature, CallSignatureHash> distinct;
      for (const NcclCallRecord& r : s->calls) distinct.insert(SignatureOf(r));
      a.distinct_signatures = static_cast<int64_t>(distinct.size());
    }
    // Period: the streaming tracker (robust to warm-up and extra calls); without timestamps
    // the calls get synthetic increasing times so that it still delimits iterations.
    std::vector<NcclCallRecord> calls = s->calls;
    if (!s->has_timestamps) {
      for (size_t i = 0; i < calls.size(); ++i) calls[i].enter_ns = static_cast<int64_t>(i);
    }
    IterationTrackerOptions tracker_options;
    tracker_options.min_calls = 24;
    std::vector<IterationSample> samples;
    if (!calls.empty()) {
      absl::StatusOr<std::vector<IterationSample>> inferred = InferIterationTimes(calls, tracker_options);
      if (!inferred.ok()) return inferred.status();
      samples = std::move(*inferred);
    }
    if (!samples.empty()) {
      a.period = samples.back().period;
      uint32_t first_epoch = samples.front().pattern_epoch;
      a.pattern_changes = static_cast<int>(samples.back().pattern_epoch - first_epoch);
      for (auto it = samples.rbegin(); it != samples.rend(); ++it) {
        if (it->extra_calls == 0 && it->period == a.period && it->end_call >= static_cast<uint64_t>(a.period)) {
          for (uint64_t p = it->end_call - static_cast<uint64_t>(a.period); p < it->end_call; ++p) {
            a.pattern.push_back(CallText(s->calls[p]));
          }
          break;
        }
      }
    }
    if (absl::StatusOr<std::vector<CallSymbol>> symbols = EncodeCallSignatures(s->calls); symbols.ok()) {
      if (a.period > 0) {
        std::vector<double> acf = CallSequenceAcf(*symbols, a.period);
        if (static_cast<int>(acf.size()) >= a.period) a.period_acf = acf[static_cast<size_t>(a.period - 1)];
      } else if (absl::StatusOr<PeriodEstimate> p = DetectPeriod(*symbols); p.ok()) {
        a.period = p->period;
        a.period_acf = p->acf;
        for (int i = 0; i < a.period && i < static_cast<int>(s->calls.size()); ++i) {
          a.pattern.push_back(CallText(s->calls[static_cast<size_t>(i)]));
        }
        a.notes.push_back("period from the ACF of the whole sequence; iterations could not be delimited");
      }
    }
    if (a.period == 0) {
      a.notes.push_back(absl::StrCat("no repeating call pattern found in ", a.calls,
                                     " calls (needs at least 3 identical iterations)"));
    }
    // Iteration times.
    if (!s->profiler_steps.empty()) {
      a.iteration_source = "ProfilerStep annotations";
      std::vector<double> per_step;
      size_t c = 0;
      for (const ProfilerStepSpan& step : s->profiler_steps) {
        a.iteration_steps.push_back(step.step);
        a.iteration_ms.push_back(static_cast<double>(step.duration_ns) / 1e6);
        while (c < s->calls.size() && s->calls[c].enter_ns < step.start_ns) ++c;
        size_t n = 0;
        for (size_t k = c; k < s->calls.size() && s->calls[k].enter_ns < step.start_ns + step.duration_ns; ++k) ++n;
        per_step.push_back(static_cast<double>(n));
      }
      a.calls_per_profiler_step = Median(per_step);
    } else if (s->has_timestamps && !samples.empty()) {
      a.iteration_source = "NCCL call timestamps";
      int64_t i = 0;
      for (const IterationSample& sample : samples) {
        a.iteration_steps.push_back(i++);
        a.iteration_ms.push_back(static_cast<double>(sample.duration_ns) / 1e6);
      }
      if (s->timestamp_resolution_ns >= 1000000) {
        a.notes.push_back(absl::StrFormat(
            "timestamps have %s resolution, so iteration times are quantised; log fractions of a "
            "second, e.g. NCCL_DEBUG_TIMESTAMP_FORMAT='[%%F %%T.%%6f] '",
            s->timestamp_resolution_ns >= 1000000000 ? "1 s" : "millisecond"));
      }
    } else {
      a.iteration_source = "none";
      if (!s->has_timestamps) {
        a.notes.push_back(
            "no timestamps: period and call structure only; iteration times need timestamps "
            "(NCCL >= 2.26: NCCL_DEBUG_TIMESTAMP_LEVELS=INFO NCCL_DEBUG_TIMESTAMP_FORMAT='[%F %T.%6f] ')");
      }
    }
    a.stats = Summarize(a.iteration_ms);
    absl::StatusOr<ChangeAnalysis> change = AnalyzeChanges(a.iteration_steps, a.iteration_ms, options);
    if (!change.ok()) return change.status();
    a.change = std::move(*change);
    report.streams.push_back(std::move(a));
  }
  return report;
}

absl::StatusOr<StacksReport> AnalyzeStacks(const ParallelLayout& layout,
                                           const std::vector<RankStackFile>& files,
                                           const StackAggregationOptions& options) {
  StacksReport report;
  report.layout = layout.DebugString();
  report.world_size = layout.world_size();
  std::map<int, RankStacks> by_rank;
  for (const RankStackFile& f : files) {
    if (f.rank < 0 || f.rank >= layout.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat(f.path, ": rank ", f.rank, " (from the ",
                                                     f.rank_rule, ") is outside the layout ",
                                                     layout.DebugString()));
    }
    StackFileSummary s;
    s.path = f.path;
    s.rank = f.rank;
    s.rank_rule = f.rank_rule;
    s.tool = StackToolName(f.tool);
    s.processes = static_cast<int>(f.processes.size());
    for (const ProcessStack& p : f.processes) s.threads += static_cast<int>(p.threads.size());
    report.files.push_back(s);
    RankStacks& r = by_rank[f.rank];
    r.rank = f.rank;
    r.processes.insert(r.processes.end(), f.processes.begin(), f.processes.end());
  }
  for (int r = 0; r < layout.world_size(); ++r) {
    if (!by_rank.count(r)) report.missing_ranks.push_back(r);
  }
  std::vector<RankStacks> ranks;
  for (auto& [rank, stacks] : by_rank) ranks.push_back(std::move(stacks));
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks, options);
  if (!agg.ok()) return agg.status();
  report.aggregation = std::move(*agg);
  for (const StackGroup& g : report.aggregation.groups) {
    std::set<int> machines;
    for (int r : g.ranks) machines.insert(layout.MachineOf(r));
    report.machines_of_groups.emplace_back(machines.begin(), machines.end());
  }
  return report;
}

}  // namespace peregrine
