#include "controller/kube/reconcile_result.h"

namespace peregrine::kube {

QueueDecision DecideQueueAction(const absl::StatusOr<ReconcileResult>& result) {
  if (!result.ok()) {
    if (absl::IsInvalidArgument(result.status())) return {QueueAction::kForget, absl::ZeroDuration()};
    return {QueueAction::kAddRateLimited, absl::ZeroDuration()};
  }
  if (result->requeue_after > absl::ZeroDuration()) {
    return {QueueAction::kForgetAndAddAfter, result->requeue_after};
  }
  if (result->requeue) return {QueueAction::kAddRateLimited, absl::ZeroDuration()};
  return {QueueAction::kForget, absl::ZeroDuration()};
}

void ApplyReconcileResult(WorkQueue& queue, const std::string& key, const absl::StatusOr<ReconcileResult>& result) {
  const QueueDecision decision = DecideQueueAction(result);
  switch (decision.action) {
    case QueueAction::kForget:
      queue.Forget(key);
      return;
    case QueueAction::kForgetAndAddAfter:
      queue.Forget(key);
      queue.AddAfter(key, decision.after);
      return;
    case QueueAction::kAddRateLimited:
      queue.AddRateLimited(key);
      return;
  }
}

}  // namespace peregrine::kube
