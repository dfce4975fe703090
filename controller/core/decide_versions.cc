// DecideJob, code versions: applying a version, hot updates and rollback.
#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/conditions.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

namespace peregrine::decision_internal {

// Makes `code` the running version (recorded in the bounded history) for the next attempt.
// `code` is a copy: callers pass *status.pending_code (reset below) or an entry of the
// version history (which push_back may reallocate), so a reference would dangle.
void Decider::ApplyCode(CodeVersionSpec code, const std::string& reason) {
  JobStatus& st = plan_.status;
  st.code = code;
  st.pending_code.reset();
  st.pending_code_since = 0;
  st.version_history.push_back(VersionRecord{code, now_, reason, VersionOutcome::kRunning, st.last_completed_step});
  TrimFront(st.version_history, config_.max_versions);
}

void Decider::Rollback(const CodeVersionSpec& target, Incident* inc, const std::string& why) {
  JobStatus& st = plan_.status;
  const std::string from = st.code.revision;
  if (!st.version_history.empty()) st.version_history.back().outcome = VersionOutcome::kRolledBack;
  ApplyCode(target, absl::StrCat("rollback: ", why));
  st.reattempts = 0;
  inc->actions.push_back(absl::StrFormat("roll back code revision %s -> %s", from, target.revision));
  Event(JobEventType::kWarning, "RolledBack", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
}

// Hot update: the desired code (spec.codeVersion) differs from the running one. Urgent
// (annotation peregrine.dev/hot-update: urgent) restarts in place now; otherwise it
// waits for the next failure-triggered restart or hotUpdateWindowHours.
void Decider::HotUpdate() {
  JobStatus& st = plan_.status;
  if (st.phase != JobPhase::kRunning || OpenIncident() != nullptr) return;
  const CodeVersionSpec& desired = spec_.code;
  if (st.pending_code && !(*st.pending_code == desired)) st.pending_code.reset();
  if (desired.command.empty() || desired == st.code || WasRejected(st.version_history, desired)) return;
  // A version with another image needs new pods (decide_images.cc): it waits while that
  // would lose every in-memory checkpoint, and until a standby runs the new image.
  const bool new_pods = SlotsNeedImage(desired.image);
  if (const std::string blocker = ImageSwitchBlocker(desired); !blocker.empty()) {
    if (!st.pending_code) {
      st.pending_code = desired;
      st.pending_code_since = now_;
      Event(JobEventType::kWarning, "ImageUpdateBlocked", absl::StrCat("code revision ", desired.revision, ": ", blocker));
    }
    return;
  }
  auto urgent_it = job_.metadata.annotations.find("peregrine.dev/hot-update");
  const bool urgent = urgent_it != job_.metadata.annotations.end() && urgent_it->second == "urgent";
  const int64_t window =
      static_cast<int64_t>(spec_.fault_tolerance.hot_update_window_hours * 3600.0 * kNanosPerSecond);
  if (!urgent && !st.pending_code) {
    st.pending_code = desired;
    st.pending_code_since = now_;
    Event(JobEventType::kNormal, "HotUpdatePending",
          absl::StrFormat("code revision %s waits for the next restart (at most %.1f h)", desired.revision,
                          spec_.fault_tolerance.hot_update_window_hours));
    return;
  }
  if (!urgent && now_ < st.pending_code_since + window) {
    plan_.requeue_after_ns = st.pending_code_since + window - now_;
    return;
  }
  if (new_pods && !PoolReadyOn(desired.image)) {
    // Standbys first: ReplaceStaleStandbys moves the pool to the pending version's image;
    // training goes on unchanged until one of them is ready on it.
    if (!st.pending_code) {
      st.pending_code = desired;
      st.pending_code_since = now_;
    }
    return;
  }
  const std::string from = st.code.revision;
  ApplyCode(desired, urgent ? "urgent hot update" : "hot update window expired");
  st.attempt += 1;
  SetResumePoint(nullptr);
  st.attempt_started_at = now_;
  st.master_addr = MasterAddr();
  st.master_port = obs_.candidate_master_port;
  st.reattempts = 0;
  st.rollbacks = 0;
  Event(JobEventType::kNormal, "HotUpdate",
        absl::StrFormat("code revision %s -> %s: restart %d machines %s from step %d (attempt %d)", from,
                        desired.revision, st.slots.size(), new_pods ? "on new pods" : "in place", st.resume_step,
                        st.attempt));
}

}  // namespace peregrine::decision_internal
