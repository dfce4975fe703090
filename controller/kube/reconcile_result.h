// What one reconcile of a work-queue key asks for, and the one function that applies it
// to the WorkQueue (controller-runtime's Reconcile result and its worker's handling).
// A reconciler returns absl::StatusOr<ReconcileResult>; the worker passes it to
// ApplyReconcileResult and never touches the queue otherwise. Thread-safe as the queue is.
#ifndef PEREGRINE_CONTROLLER_KUBE_RECONCILE_RESULT_H_
#define PEREGRINE_CONTROLLER_KUBE_RECONCILE_RESULT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/kube/work_queue.h"

namespace peregrine::kube {

// A reconcile that succeeded. Neither field set: done, the key is forgotten until an
// informer or agent adds it again.
struct ReconcileResult {
  // Look again after this long (the key's backoff is reset first). Wins over `requeue`.
  absl::Duration requeue_after = absl::ZeroDuration();
  // Look again after the key's backoff (the rate limiter decides when).
  bool requeue = false;
};

// What the queue does with a key after its reconcile.
enum class QueueAction {
  kForget,             // reset the key's backoff; nothing queued
  kForgetAndAddAfter,  // reset the backoff, queue the key after `after`
  kAddRateLimited,     // queue the key after its backoff (which grows)
};

struct QueueDecision {
  QueueAction action = QueueAction::kForget;
  absl::Duration after = absl::ZeroDuration();  // kForgetAndAddAfter only
};

// Pure. The error's code says what happens next:
//   OK, requeue_after > 0        -> kForgetAndAddAfter(requeue_after)
//   OK, requeue                  -> kAddRateLimited
//   OK, neither                  -> kForget
//   kInvalidArgument             -> kForget: permanent, already reported to the user as
//                                   a condition; only a change of the object helps
//   any other code (kUnavailable: retry with backoff; kAborted: a conflict, re-read;
//   kFailedPrecondition: wait for the state to change; ...) -> kAddRateLimited
QueueDecision DecideQueueAction(const absl::StatusOr<ReconcileResult>& result);

// Applies DecideQueueAction(result) to `key` in `queue`. Call it between Get and Done.
void ApplyReconcileResult(WorkQueue& queue, const std::string& key, const absl::StatusOr<ReconcileResult>& result);

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_RECONCILE_RESULT_H_
