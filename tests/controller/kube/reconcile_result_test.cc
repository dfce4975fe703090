// ReconcileResult and ApplyReconcileResult: which result or error of a reconcile yields
// which work-queue action, checked on a real WorkQueue with a manual clock (no threads).
#include "controller/kube/reconcile_result.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/status/status.h"
#include "base/clock.h"
#include "controller/kube/work_queue.h"

namespace peregrine::kube {
namespace {

ReconcileResult After(absl::Duration d, bool requeue = false) {
  ReconcileResult r;
  r.requeue_after = d;
  r.requeue = requeue;
  return r;
}

ReconcileResult Requeue() {
  ReconcileResult r;
  r.requeue = true;
  return r;
}

struct Case {
  const char* name;
  absl::StatusOr<ReconcileResult> result;
  QueueAction action;
  absl::Duration after;
};

std::vector<Case> Cases() {
  return {
      {"done", ReconcileResult{}, QueueAction::kForget, absl::ZeroDuration()},
      {"look again later", After(absl::Seconds(30)), QueueAction::kForgetAndAddAfter, absl::Seconds(30)},
      {"requeue_after wins over requeue", After(absl::Seconds(2), true), QueueAction::kForgetAndAddAfter,
       absl::Seconds(2)},
      {"requeue with backoff", Requeue(), QueueAction::kAddRateLimited, absl::ZeroDuration()},
      {"permanent (already a condition)", absl::InvalidArgumentError("bad spec"), QueueAction::kForget,
       absl::ZeroDuration()},
      {"unavailable", absl::UnavailableError("api server down"), QueueAction::kAddRateLimited, absl::ZeroDuration()},
      {"conflict: re-read", absl::AbortedError("409"), QueueAction::kAddRateLimited, absl::ZeroDuration()},
      {"wait for a change", absl::FailedPreconditionError("re-created"), QueueAction::kAddRateLimited,
       absl::ZeroDuration()},
      {"anything else", absl::InternalError("?"), QueueAction::kAddRateLimited, absl::ZeroDuration()},
  };
}

TEST_CASE("DecideQueueAction maps each result and error code to one queue action", "[unit]") {
  for (const Case& c : Cases()) {
    INFO(c.name);
    const QueueDecision d = DecideQueueAction(c.result);
    CHECK(d.action == c.action);
    CHECK(d.after == c.after);
  }
}

TEST_CASE("ApplyReconcileResult leaves the work queue in the state the action names", "[unit]") {
  const std::string key = "ns/job";
  for (const Case& c : Cases()) {
    INFO(c.name);
    ManualClock clock;
    WorkQueue queue(&clock);
    // One earlier failure: the key has backoff history (5 ms), which Forget clears.
    queue.AddRateLimited(key);
    REQUIRE(queue.NumRequeues(key) == 1);
    clock.Advance(absl::Milliseconds(5));
    REQUIRE(queue.TryGet() == key);

    ApplyReconcileResult(queue, key, c.result);
    queue.Done(key);

    CHECK(queue.Len() == 0);  // nothing is ready at once: the worker never spins
    switch (c.action) {
      case QueueAction::kForget:
        CHECK(queue.NumRequeues(key) == 0);
        CHECK(queue.NumWaiting() == 0);
        break;
      case QueueAction::kForgetAndAddAfter:
        CHECK(queue.NumRequeues(key) == 0);
        CHECK(queue.NumWaiting() == 1);
        clock.Advance(c.after - absl::Milliseconds(1));
        CHECK(queue.Len() == 0);
        clock.Advance(absl::Milliseconds(1));
        CHECK(queue.Len() == 1);
        break;
      case QueueAction::kAddRateLimited:
        CHECK(queue.NumRequeues(key) == 2);
        CHECK(queue.NumWaiting() == 1);
        clock.Advance(absl::Milliseconds(10));  // the second failure's backoff: 5 ms * 2
        CHECK(queue.Len() == 1);
        break;
    }
  }
}

}  // namespace
}  // namespace peregrine::kube
