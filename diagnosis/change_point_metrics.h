// Scores of change points against human annotations, as the Turing Change Point Dataset
// benchmark (van den Burg & Williams, 2020) defines them: the F1 measure with a margin
// (precision against the union of all annotators' change points, recall averaged over
// annotators, the start of the series counted as a change point by every party) and the
// segmentation covering (Arbelaez et al. 2010), averaged over annotators. Definitions
// are spelt out in change_point_metrics.cc.
//
// Locations are 0-based sample indexes: a change point at t means sample t is the first
// of a new segment. Predictions are cleaned the way the benchmark does before scoring
// (CleanChangePoints). Bad input (no annotator, n_obs < 1, negative margin, a location
// outside [0, n_obs)) fails with kInvalidArgument naming the problem.
//
// Pure computation; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_CHANGE_POINT_METRICS_H_
#define PEREGRINE_DIAGNOSIS_CHANGE_POINT_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine {

// One annotator's change points; an empty list is a valid "no change" annotation.
using ChangePointAnnotations = std::vector<std::vector<int64_t>>;

struct ChangePointF1 {
  double f1 = 0.0;
  double precision = 0.0;
  double recall = 0.0;
};

// Sorted, deduplicated predictions inside [1, n_obs - 2] (the benchmark drops 0 and the
// last index: several methods report them by default and they carry no information).
std::vector<int64_t> CleanChangePoints(absl::Span<const int64_t> predictions, int64_t n_obs);

// The predicted locations that match a true location within `margin`, each prediction
// matched at most once (for each truth in increasing order, the closest free prediction).
// Returns the number of matched true locations.
int64_t CountTruePositives(absl::Span<const int64_t> truth, absl::Span<const int64_t> predictions,
                           int64_t margin);

absl::StatusOr<ChangePointF1> ChangePointFMeasure(const ChangePointAnnotations& annotations,
                                                  absl::Span<const int64_t> predictions,
                                                  int64_t n_obs, int64_t margin = 5);

absl::StatusOr<double> ChangePointCovering(const ChangePointAnnotations& annotations,
                                           absl::Span<const int64_t> predictions, int64_t n_obs);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_CHANGE_POINT_METRICS_H_
