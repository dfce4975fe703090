// Loss monitor: NaN / Inf and loss or grad-norm spikes in the ranks' reported losses
// ("crash with no culprit, NaN loss, loss or grad-norm jump 5x -> pause;
// stop-time diagnosis").
//
// Each round the decision engine passes the latest (step, loss, grad-norm) of every rank of
// the current attempt. The monitor keeps a robust running reference in the job status
// (LossReference, so it survives controller restarts): for each new step it folds in the
// median over the ranks reporting that step, keeps the last kLossWindow such medians and
// uses their median as the reference. Verdicts:
//   - any rank reports a NaN or infinite loss or grad-norm -> NaNLoss;
//   - once the reference holds kLossWarmupSteps steps, any rank's loss (or grad-norm) at
//     or above factor x the reference -> LossSpike.
// Non-positive values never enter the reference (a rank that printed no loss reports 0).
// A step that triggers a verdict is not folded in. Steps at or below the reference's last
// step are ignored (a rank re-reporting the same step counts once).
//
// Pure: no clocks or I/O. Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_LOSS_MONITOR_H_
#define PEREGRINE_CONTROLLER_CORE_LOSS_MONITOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/core/job_state.h"

namespace peregrine {

inline constexpr size_t kLossWindow = 16;
inline constexpr size_t kLossWarmupSteps = 5;

struct LossVerdict {
  IncidentKind kind = IncidentKind::kNaNLoss;  // kNaNLoss | kLossSpike
  std::string signal;  // human-readable evidence (ranks, values, reference)
  std::vector<int> ranks;
  uint64_t step = 0;
};

// The reference value: median of the window (0 when empty).
double LossReferenceValue(const std::vector<double>& window);

// Checks `losses` (global rank -> latest values) against `reference`, updating it with the
// steps that are healthy. `factor` is faultTolerance.lossSpikeFactor (> 1).
std::optional<LossVerdict> CheckLosses(const std::map<int, RankLossObservation>& losses, double factor,
                                       LossReference* reference);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_LOSS_MONITOR_H_
