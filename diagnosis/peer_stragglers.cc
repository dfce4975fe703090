#include "diagnosis/peer_stragglers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

// How stragglers are told from job-wide changes.
//
// Normalisation. The steps of all workers are merged (sorted, distinct); a step that at
// least min_workers workers logged is normalised with its median m and robust standard
// deviation s = max(1.4826 x MAD, min_relative_scale x m) over the workers that logged it
// (missing cells, sampled steps and workers that joined late simply contribute nothing to
// that step). Each of those workers gets ratio = t / m and z = (t - m) / s at that step. The
// median and the MAD ignore up to half of the workers being slow, so one straggler (or a
// few) does not move its peers' reference. A change that every worker shares moves m and
// leaves every ratio where it was: it appears once, in the job-wide series m, and in no
// worker's ratio series. Steps with fewer workers are counted (steps_too_few_workers) and
// left out: with two values the median is their mean and both deviate by the same amount,
// so which one is slow cannot be told.
//
// Change points. The job-wide series (m per normalised step) and each worker's ratio
// series go through a fresh FailSlowDetector each (BOCD + verification, change_point.h):
// job-wide changes are reported with onset and size (relative_change, severity), a
// worker's changes are relative to its peers (a ratio going 1.0 -> 1.3 is a slowdown of
// 30% relative to them), and its slowdown episodes make it a straggler.
//
// Persistently slow (a worker slow from the start has no change point of its own). Over
// the worker's normalised steps (at least min_steps), with z~ the median of its z-scores
// and e~ the median of its ratios minus 1, it is persistently slow when
//    z~ > persistent_z (default 3)   AND   e~ > min_relative_excess (default 0.05).
// Why both, and these defaults:
//  - the z condition makes the rule spread-aware: a worker 11% over its peers is far out
//    when the workers agree within 1% (z~ ~ 11) and ordinary when they scatter by 5-10%
//    (z~ ~ 1-2, as in clusters of shared or heterogeneous GPUs where every worker has its
//    own typical speed). 3 robust standard deviations is the usual outlier fence: under
//    normal noise 0.13% of a healthy worker's steps lie beyond it, and its median z, the
//    median of many such values, is within a few tenths of 0;
//  - the excess condition keeps a tight job (the 1% floor of s, or real spreads of a
//    fraction of a percent) from flagging workers a few percent slow that cost little:
//    in synchronous training a straggler costs the job at most its excess, and below 5%
//    that is within the run-to-run variation of step times; 5% is also half the
//    detector's default verification threshold (10%), so a persistent straggler is
//    flagged at a smaller size than a change needs to be verified;
//  - medians, not means, over the steps: a worker hit by a few slow steps (a checkpoint
//    of its own, a transient) is not persistently slow; that is what change points are for.
// PeerSpread/IsPersistentStraggler expose the same arithmetic for one cross-section.
//
// Cost: merging the steps is a sort of the distinct steps; each step's median and MAD use
// nth_element over its workers: O(workers x steps) time and memory overall, plus the
// detectors (O(1) amortised per sample each).

namespace peregrine {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMadToSigma = 1.4826;

// Median of `v` (reordered); v non-empty.
double MedianInPlace(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

absl::Status CheckOptions(const PeerStragglerOptions& o) {
  if (o.min_workers < 3) {
    return absl::InvalidArgumentError(absl::StrCat("min_workers must be >= 3, got ", o.min_workers));
  }
  if (!(o.min_relative_scale >= 0 && o.min_relative_scale < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_relative_scale must be in [0, 1), got ", o.min_relative_scale));
  }
  if (!(o.persistent_z > 0 && std::isfinite(o.persistent_z))) {
    return absl::InvalidArgumentError(absl::StrCat("persistent_z must be > 0, got ", o.persistent_z));
  }
  if (!(o.min_relative_excess >= 0 && std::isfinite(o.min_relative_excess))) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_relative_excess must be >= 0, got ", o.min_relative_excess));
  }
  if (o.min_steps < 1) return absl::InvalidArgumentError(absl::StrCat("min_steps must be >= 1, got ", o.min_steps));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SeriesChanges> DetectSeriesChanges(absl::Span<const int64_t> steps,
                                                  absl::Span<const double> values,
                                                  const FailSlowDetectorOptions& options) {
  if (steps.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps and values differ in length (", steps.size(), " and ", values.size(), ")"));
  }
  absl::StatusOr<FailSlowDetector> detector = FailSlowDetector::Create(options);
  if (!detector.ok()) return detector.status();
  // The detector counts finite samples only; map its indexes back to steps.
  std::vector<int64_t> index_to_step;
  std::vector<FailSlowEvent> events;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    index_to_step.push_back(steps[i]);
    FailSlowUpdate u = detector->Update(values[i]);
    events.insert(events.end(), u.events.begin(), u.events.end());
  }
  auto step_of = [&](int64_t index) {
    if (index_to_step.empty()) return int64_t{0};
    index = std::clamp<int64_t>(index, 0, static_cast<int64_t>(index_to_step.size()) - 1);
    return index_to_step[static_cast<size_t>(index)];
  };
  SeriesChanges out;
  out.rejected_change_points = detector->stats().rejected;
  std::optional<PeerEpisode> open;
  for (const FailSlowEvent& e : events) {
    PeerChange c;
    c.kind = e.kind;
    c.step = step_of(e.index);
    c.confirmed_step = step_of(e.confirmed_at);
    c.posterior = e.posterior;
    c.mean_before = e.mean_before;
    c.mean_after = e.mean_after;
    c.relative_change = e.relative_change;
    c.severity = e.severity;
    out.changes.push_back(c);
    switch (e.kind) {
      case FailSlowEventKind::kSlowdownStart:
        open = PeerEpisode{c.step, std::nullopt, e.severity};
        break;
      case FailSlowEventKind::kLevelShift:
        if (open) open->severity = std::max(open->severity, e.severity);
        break;
      case FailSlowEventKind::kSlowdownEnd:
        if (open) {
          open->end_step = c.step;
          out.episodes.push_back(*open);
          open.reset();
        }
        break;
    }
  }
  if (open) out.episodes.push_back(*open);
  return out;
}

PeerSpread SpreadOf(absl::Span<const double> values, double min_relative_scale) {
  PeerSpread s;
  std::vector<double> v;
  v.reserve(values.size());
  for (double x : values) {
    if (std::isfinite(x)) v.push_back(x);
  }
  s.workers = static_cast<int>(v.size());
  if (v.empty()) return s;
  s.median = MedianInPlace(v);
  for (double& x : v) x = std::abs(x - s.median);
  const double mad = MedianInPlace(v);
  s.scale = std::max(kMadToSigma * mad, min_relative_scale * std::abs(s.median));
  return s;
}

bool IsPersistentStraggler(double median_z, double median_excess, const PeerStragglerOptions& options) {
  return median_z > options.persistent_z && median_excess > options.min_relative_excess;
}

absl::StatusOr<PeerStragglerReport> AnalyzePeerStragglers(absl::Span<const PeerWorkerSeries> workers,
                                                          const PeerStragglerOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  for (const PeerWorkerSeries& w : workers) {
    if (w.steps.size() != w.times.size()) {
      return absl::InvalidArgumentError(absl::StrCat("worker '", w.worker, "': ", w.steps.size(), " steps but ",
                                                     w.times.size(), " times"));
    }
    for (size_t i = 0; i < w.steps.size(); ++i) {
      if (i > 0 && w.steps[i] <= w.steps[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat("worker '", w.worker, "': steps not strictly increasing (",
                                                       w.steps[i - 1], " then ", w.steps[i], ")"));
      }
      if (w.times[i] < 0 || std::isinf(w.times[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker '", w.worker, "': step ", w.steps[i], " has time ", w.times[i]));
      }
    }
  }
  PeerStragglerReport report;
  // The distinct steps, and each worker's cells on them (NaN where it logged nothing).
  std::vector<int64_t> all;
  for (const PeerWorkerSeries& w : workers) all.insert(all.end(), w.steps.begin(), w.steps.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  report.steps_total = static_cast<int64_t>(all.size());
  const size_t n_steps = all.size();
  std::vector<std::vector<double>> cells(workers.size(), std::vector<double>(n_steps, kNaN));
  for (size_t w = 0; w < workers.size(); ++w) {
    size_t j = 0;
    for (size_t i = 0; i < workers[w].steps.size(); ++i) {
      while (all[j] < workers[w].steps[i]) ++j;
      cells[w][j] = workers[w].times[i];
    }
  }
  // Per step: median and robust spread over the workers that logged it.
  std::vector<size_t> normalised;  // column of each normalised step
  std::vector<double> column(workers.size());
  for (size_t j = 0; j < n_steps; ++j) {
    for (size_t w = 0; w < workers.size(); ++w) column[w] = cells[w][j];
    const PeerSpread s = SpreadOf(column, options.min_relative_scale);
    if (s.workers < options.min_workers) {
      if (s.workers > 0) ++report.steps_too_few_workers;
      continue;
    }
    normalised.push_back(j);
    report.steps.push_back(all[j]);
    report.step_median.push_back(s.median);
    report.step_scale.push_back(s.scale);
  }
  absl::StatusOr<SeriesChanges> job = DetectSeriesChanges(report.steps, report.step_median, options.detector);
  if (!job.ok()) return job.status();
  report.job_wide = std::move(*job);

  std::vector<double> zs, ratios;
  for (size_t w = 0; w < workers.size(); ++w) {
    WorkerPeerVerdict v;
    v.worker = workers[w].worker;
    zs.clear();
    for (size_t k = 0; k < normalised.size(); ++k) {
      const double t = cells[w][normalised[k]];
      if (!std::isfinite(t)) continue;
      const double m = report.step_median[k], s = report.step_scale[k];
      // A step whose median is 0 (all idle) has no relative scale: skip it.
      if (!(m > 0) || !(s > 0)) continue;
      v.steps.push_back(report.steps[k]);
      v.ratios.push_back(t / m);
      zs.push_back((t - m) / s);
    }
    v.steps_compared = static_cast<int64_t>(v.steps.size());
    if (v.steps.empty()) {
      v.median_ratio = v.median_z = v.median_excess = kNaN;
    } else {
      ratios = v.ratios;
      v.median_ratio = MedianInPlace(ratios);
      v.median_z = MedianInPlace(zs);
      v.median_excess = v.median_ratio - 1.0;
      v.persistently_slow = v.steps_compared >= options.min_steps &&
                            IsPersistentStraggler(v.median_z, v.median_excess, options);
    }
    absl::StatusOr<SeriesChanges> c = DetectSeriesChanges(v.steps, v.ratios, options.detector);
    if (!c.ok()) return c.status();
    v.changes = std::move(*c);
    if (v.persistently_slow) report.persistently_slow.push_back(v.worker);
    if (!v.changes.episodes.empty()) report.stragglers.push_back(v.worker);
    report.workers.push_back(std::move(v));
  }
  return report;
}

}  // namespace peregrine
