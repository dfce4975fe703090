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

namespace {

absl::StatusOr<FailSlowDetectorOptions> DetectorOptions(const ChangeOptions& options) {
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
  return o;
}

}  // namespace

absl::StatusOr<ChangeAnalysis> AnalyzeChanges(absl::Span<const int64_t> steps,
                                              absl::Span<const double> times,
                                              const ChangeOptions& options) {
  if (steps.size() != times.size()) {
    return absl::InvalidArgumentError("steps and times differ in length");
  }
  absl::StatusOr<FailSlowDetectorOptions> o = DetectorOptions(options);
  if (!o.ok()) return o.status();
  return DetectSeriesChanges(steps, times, *o);
}

absl::StatusOr<StepsReport> AnalyzeStepTimes(const StepTimesTable& table, const StepsOptions& options) {
  absl::StatusOr<FailSlowDetectorOptions> detector = DetectorOptions(options.change);
  if (!detector.ok()) return detector.status();
  if (!(options.persistent_z > 0 && std::isfinite(options.persistent_z))) {
    return absl::InvalidArgumentError(absl::StrCat("--straggler-z must be > 0, got ", options.persistent_z));
  }
  if (!(options.min_relative_excess >= 0 && std::isfinite(options.min_relative_excess))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler-excess must be >= 0, got ", options.min_relative_excess));
  }
  PeerStragglerOptions peer_options;
  peer_options.persistent_z = options.persistent_z;
  peer_options.min_relative_excess = options.min_relative_excess;
  peer_options.detector = *detector;
  std::vector<PeerWorkerSeries> series;
  for (const WorkerStepTimes& w : table.workers) series.push_back(PeerWorkerSeries{w.worker, w.steps, w.times});
  absl::StatusOr<PeerStragglerReport> peers = AnalyzePeerStragglers(series, peer_options);
  if (!peers.ok()) return peers.status();

  StepsReport report;
  report.format = table.format;
  report.unit = table.unit;
  report.min_workers = peer_options.min_workers;
  report.persistent_z = peer_options.persistent_z;
  report.min_relative_excess = peer_options.min_relative_excess;
  report.min_relative_scale = peer_options.min_relative_scale;
  report.steps_total = peers->steps_total;
  report.steps_compared = static_cast<int64_t>(peers->steps.size());
  report.job_wide = std::move(peers->job_wide);
  std::vector<double> medians;
  for (size_t i = 0; i < table.workers.size(); ++i) {
    const WorkerStepTimes& w = table.workers[i];
    WorkerPeerVerdict& v = peers->workers[i];
    WorkerAnalysis a;
    a.worker = w.worker;
    if (!w.steps.empty()) {
      a.first_step = w.steps.front();
      a.last_step = w.steps.back();
    }
    a.stats = Summarize(w.times);
    a.steps_compared = v.steps_compared;
    if (v.steps_compared > 0) {
      a.ratio_to_peers = v.median_ratio;
      a.peer_z = v.median_z;
      a.persistently_slow = v.persistently_slow;
      a.changes_relative_to_peers = true;
      a.change = std::move(v.changes);
    } else {
      absl::StatusOr<ChangeAnalysis> change = AnalyzeChanges(w.steps, w.times, options.change);
      if (!change.ok()) return change.status();
      a.change = std::move(*change);
    }
    if (a.stats.count > 0) medians.push_back(a.stats.median);
    if (a.stats.count < 30) {
      report.notes.push_back(absl::StrCat("worker '", w.worker, "' has only ", a.stats.count,
                                          " steps; change points need ~30 or more"));
    }
    report.workers.push_back(std::move(a));
  }
  report.median_of_medians = medians.empty() ? 0.0 : Median(medians);
  for (WorkerAnalysis& a : report.workers) {
    if (a.steps_compared == 0 && report.median_of_medians > 0) {
      a.ratio_to_peers = a.stats.median / report.median_of_medians;
    }
    if (a.persistently_slow) report.persistently_slow.push_back(a.worker);
    if (!a.change.episodes.empty()) report.with_slowdowns.push_back(a.worker);
  }
  if (report.steps_compared == 0 && !table.workers.empty()) {
    report.notes.push_back(absl::StrCat(
        "no step was logged by ", report.min_workers,
        " or more workers: no peer comparison (no persistently slow worker, no job-wide changes); change "
        "points are on each worker's own times, so a change they share shows on each"));
  } else if (peers->steps_too_few_workers > 0) {
    report.notes.push_back(absl::StrCat(peers->steps_too_few_workers, " of ", report.steps_total,
                                        " steps were logged by fewer than ", report.min_workers,
                                        " workers and are not compared"));
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
