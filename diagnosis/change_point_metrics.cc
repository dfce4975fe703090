#include "diagnosis/change_point_metrics.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

// Definitions (TCPD benchmark, van den Burg & Williams 2020, section 5.1):
//
// F1 with margin M. Every annotator's set T_k and the prediction set X get the location 0
// added (the start of the series is a change point for everyone, so a "no change" answer
// scores a true positive). A true positive of a truth set T against X: for each tau in T
// (increasing), the closest x in X with |tau - x| <= M not already used (ties: the smaller
// x); each x is used at most once. With T* the union of the annotators' sets,
//   precision P = |TP(T*, X)| / |X|,
//   recall    R = (1/K) sum_k |TP(T_k, X)| / |T_k|,
//   F1        = 2 P R / (P + R)   (0 when P + R = 0).
//
// Covering. A set of change points splits [0, n) into segments (a location starts a
// segment; 0 and duplicates add nothing). The covering of the annotator's segmentation S
// by the predicted segmentation S' is
//   C(S', S) = (1/n) sum_{A in S} |A| max_{A' in S'} |A ∩ A'| / |A ∪ A'|,
// and the score is the mean of C(S', S_k) over the annotators.
//
// Predictions are cleaned first (CleanChangePoints): locations outside [1, n - 2] are
// dropped and duplicates removed, as the benchmark's summarising step does.

namespace peregrine {
namespace {

absl::Status CheckLocations(absl::Span<const int64_t> v, int64_t n_obs, const char* what) {
  for (int64_t x : v) {
    if (x < 0 || x >= n_obs) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " location ", x, " outside [0, ", n_obs, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCommon(const ChangePointAnnotations& annotations, int64_t n_obs) {
  if (n_obs < 1) return absl::InvalidArgumentError(absl::StrCat("n_obs must be >= 1, got ", n_obs));
  if (annotations.empty()) return absl::InvalidArgumentError("no annotator");
  for (const auto& a : annotations) {
    if (absl::Status s = CheckLocations(a, n_obs, "annotated"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<int64_t> WithZero(absl::Span<const int64_t> v) {
  std::set<int64_t> s(v.begin(), v.end());
  s.insert(0);
  return std::vector<int64_t>(s.begin(), s.end());
}

// Segment boundaries [b_0 = 0, b_1, ..., b_m = n) of the segmentation by `cps`.
std::vector<int64_t> Boundaries(absl::Span<const int64_t> cps, int64_t n_obs) {
  std::set<int64_t> s(cps.begin(), cps.end());
  s.insert(0);
  std::vector<int64_t> b(s.begin(), s.end());
  b.push_back(n_obs);
  return b;
}

}  // namespace

std::vector<int64_t> CleanChangePoints(absl::Span<const int64_t> predictions, int64_t n_obs) {
  std::set<int64_t> s;
  for (int64_t x : predictions) {
    if (x >= 1 && x < n_obs - 1) s.insert(x);
  }
  return std::vector<int64_t>(s.begin(), s.end());
}

int64_t CountTruePositives(absl::Span<const int64_t> truth, absl::Span<const int64_t> predictions,
                           int64_t margin) {
  std::set<int64_t> free(predictions.begin(), predictions.end());
  const std::set<int64_t> taus(truth.begin(), truth.end());
  int64_t tp = 0;
  for (int64_t tau : taus) {
    auto best = free.end();
    for (auto it = free.lower_bound(tau - margin); it != free.end() && *it <= tau + margin; ++it) {
      if (best == free.end() || std::llabs(*it - tau) < std::llabs(*best - tau)) best = it;
    }
    if (best == free.end()) continue;
    ++tp;
    free.erase(best);
  }
  return tp;
}

absl::StatusOr<ChangePointF1> ChangePointFMeasure(const ChangePointAnnotations& annotations,
                                                  absl::Span<const int64_t> predictions,
                                                  int64_t n_obs, int64_t margin) {
  if (absl::Status s = CheckCommon(annotations, n_obs); !s.ok()) return s;
  if (margin < 0) return absl::InvalidArgumentError(absl::StrCat("margin must be >= 0, got ", margin));
  if (absl::Status s = CheckLocations(predictions, n_obs, "predicted"); !s.ok()) return s;
  const std::vector<int64_t> x = WithZero(CleanChangePoints(predictions, n_obs));
  std::set<int64_t> all;
  double recall_sum = 0.0;
  for (const auto& a : annotations) {
    const std::vector<int64_t> t = WithZero(a);
    all.insert(t.begin(), t.end());
    recall_sum += static_cast<double>(CountTruePositives(t, x, margin)) / static_cast<double>(t.size());
  }
  const std::vector<int64_t> tstar(all.begin(), all.end());
  ChangePointF1 r;
  r.precision = static_cast<double>(CountTruePositives(tstar, x, margin)) / static_cast<double>(x.size());
  r.recall = recall_sum / static_cast<double>(annotations.size());
  r.f1 = r.precision + r.recall > 0.0 ? 2.0 * r.precision * r.recall / (r.precision + r.recall) : 0.0;
  return r;
}

absl::StatusOr<double> ChangePointCovering(const ChangePointAnnotations& annotations,
                                           absl::Span<const int64_t> predictions, int64_t n_obs) {
  if (absl::Status s = CheckCommon(annotations, n_obs); !s.ok()) return s;
  if (absl::Status s = CheckLocations(predictions, n_obs, "predicted"); !s.ok()) return s;
  const std::vector<int64_t> pred = Boundaries(CleanChangePoints(predictions, n_obs), n_obs);
  double total = 0.0;
  for (const auto& a : annotations) {
    const std::vector<int64_t> truth = Boundaries(a, n_obs);
    double c = 0.0;
    // Segments are intervals, so |A ∩ A'| and |A ∪ A'| follow from the endpoints; only
    // predicted segments that intersect A can give a positive overlap.
    size_t j = 0;
    for (size_t i = 0; i + 1 < truth.size(); ++i) {
      const int64_t lo = truth[i], hi = truth[i + 1];
      while (j + 2 < pred.size() && pred[j + 1] <= lo) ++j;
      double best = 0.0;
      for (size_t k = j; k + 1 < pred.size() && pred[k] < hi; ++k) {
        const int64_t inter = std::min(hi, pred[k + 1]) - std::max(lo, pred[k]);
        const int64_t uni = std::max(hi, pred[k + 1]) - std::min(lo, pred[k]);
        if (inter > 0) best = std::max(best, static_cast<double>(inter) / static_cast<double>(uni));
      }
      c += static_cast<double>(hi - lo) * best;
    }
    total += c / static_cast<double>(n_obs);
  }
  return total / static_cast<double>(annotations.size());
}

}  // namespace peregrine
