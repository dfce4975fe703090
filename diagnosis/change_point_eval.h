// Change-point methods compared on annotated real series (bench/failslow's
// changepoint-real-eval and the diagnosis tests): Peregrine's detector as `analyze steps`
// runs it, a zero predictor, and the default Bayesian online change-point detector of the
// TCPD benchmark, each returning 0-based change-point locations; ScoreChangePoints scores
// them with change_point_metrics.h.
//
// Non-finite samples (missing values) are skipped by every method and locations refer to
// the original indexes. Fails with kInvalidArgument on invalid options. The default BOCPD
// is described in change_point_eval.cc.
//
// Pure computation; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_CHANGE_POINT_EVAL_H_
#define PEREGRINE_DIAGNOSIS_CHANGE_POINT_EVAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "diagnosis/change_point.h"
#include "diagnosis/change_point_metrics.h"

namespace peregrine {

// Plain Gaussian BOCPD (Adams & MacKay) with a constant hazard 1 / lambda and a
// normal-gamma prior (m, k, a, b) on the standardised series; the change points are those
// of the maximum a posteriori segmentation. Defaults: TCPDBench's default_bocpd.
struct GaussianBocpdOptions {
  double lambda = 100.0;
  double prior_m = 0.0;
  double prior_k = 1.0;
  double prior_a = 1.0;
  double prior_b = 1.0;
};
absl::StatusOr<std::vector<int64_t>> GaussianBocpdChangePoints(absl::Span<const double> samples,
                                                               const GaussianBocpdOptions& options = {});

// Peregrine's verified changes (FailSlowEvent indexes) over the series.
absl::StatusOr<std::vector<int64_t>> PeregrineChangePoints(absl::Span<const double> samples,
                                                           const FailSlowDetectorOptions& options = {});

struct ChangePointScore {
  double f1 = 0.0;
  double precision = 0.0;
  double recall = 0.0;
  double cover = 0.0;
};
absl::StatusOr<ChangePointScore> ScoreChangePoints(const ChangePointAnnotations& annotations,
                                                   absl::Span<const int64_t> predictions,
                                                   int64_t n_obs);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_CHANGE_POINT_EVAL_H_
