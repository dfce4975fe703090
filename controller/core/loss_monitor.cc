#include "controller/core/loss_monitor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace peregrine {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void Fold(std::vector<double>& window, double value) {
  if (!(value > 0) || !std::isfinite(value)) return;
  window.push_back(value);
  if (window.size() > kLossWindow) window.erase(window.begin());
}

}  // namespace

double LossReferenceValue(const std::vector<double>& window) { return Median(window); }

std::optional<LossVerdict> CheckLosses(const std::map<int, RankLossObservation>& losses, double factor,
                                       LossReference* reference) {
  // NaN / Inf on any rank.
  std::vector<int> nan_ranks;
  std::vector<std::string> nan_values;
  uint64_t nan_step = 0;
  for (const auto& [rank, l] : losses) {
    if (std::isfinite(l.loss) && std::isfinite(l.grad_norm)) continue;
    nan_ranks.push_back(rank);
    nan_step = std::max(nan_step, l.step);
    if (nan_values.size() < 4) {
      nan_values.push_back(absl::StrFormat("rank %d step %d loss=%g grad_norm=%g", rank, l.step, l.loss, l.grad_norm));
    }
  }
  if (!nan_ranks.empty()) {
    LossVerdict v;
    v.kind = IncidentKind::kNaNLoss;
    v.ranks = nan_ranks;
    v.step = nan_step;
    v.signal = absl::StrFormat("non-finite loss or grad-norm on %d rank(s): %s%s", nan_ranks.size(),
                               absl::StrJoin(nan_values, ", "), nan_ranks.size() > nan_values.size() ? ", ..." : "");
    return v;
  }
  // Spikes against the reference (after the warm-up).
  const double loss_ref = LossReferenceValue(reference->losses);
  const double grad_ref = LossReferenceValue(reference->grad_norms);
  std::vector<int> spike_ranks;
  std::string first;
  uint64_t spike_step = 0;
  for (const auto& [rank, l] : losses) {
    const bool loss_spike = reference->losses.size() >= kLossWarmupSteps && loss_ref > 0 && l.loss >= factor * loss_ref;
    const bool grad_spike =
        reference->grad_norms.size() >= kLossWarmupSteps && grad_ref > 0 && l.grad_norm >= factor * grad_ref;
    if (!loss_spike && !grad_spike) continue;
    spike_ranks.push_back(rank);
    spike_step = std::max(spike_step, l.step);
    if (first.empty()) {
      first = loss_spike ? absl::StrFormat("rank %d step %d loss %g >= %g x reference %g", rank, l.step, l.loss, factor,
                                           loss_ref)
                         : absl::StrFormat("rank %d step %d grad-norm %g >= %g x reference %g", rank, l.step,
                                           l.grad_norm, factor, grad_ref);
    }
  }
  if (!spike_ranks.empty()) {
    LossVerdict v;
    v.kind = IncidentKind::kLossSpike;
    v.ranks = spike_ranks;
    v.step = spike_step;
    v.signal = absl::StrFormat("loss spike on %d rank(s): %s", spike_ranks.size(), first);
    return v;
  }
  // Healthy: fold in each new step's median over the ranks reporting it.
  std::map<uint64_t, std::pair<std::vector<double>, std::vector<double>>> by_step;
  for (const auto& [rank, l] : losses) {
    if (l.step <= reference->step) continue;
    by_step[l.step].first.push_back(l.loss);
    by_step[l.step].second.push_back(l.grad_norm);
  }
  for (const auto& [step, values] : by_step) {
    Fold(reference->losses, Median(values.first));
    Fold(reference->grad_norms, Median(values.second));
    reference->step = step;
  }
  return std::nullopt;
}

}  // namespace peregrine
