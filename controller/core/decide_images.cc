// DecideJob, images: which image each new pod carries, and how a change of the container
// image (an update or a rollback to a version with another image) replaces the pods.
//
// A hot update of the command or environment restarts the training processes in place;
// a pod's image cannot change in place, so a version with another image needs new pods.
// The invariant: every pod in a slot (the pods that train) runs the running version's
// image (status.code.image). Standbys are idle and may already carry the image of the
// update being prepared; a standby is only activated into a slot in the round that applies
// that version, and any pod found on another image than its slot's is replaced.
//
// The order of an image update the controller times (urgent, or its window expired):
//   1. standbys first: the standbys on the old image are deleted and the pool refilled on
//      the new one, while training goes on, unchanged, on the old image. This proves the
//      new image pulls and its agent starts before anything is stopped (a bad image costs
//      nothing but a PodsStuck condition), and the job has warm standbys on the new image
//      from its first step. The update waits until one standby is ready on the new image
//      (at once when the pool is empty by design, or no standby can be scheduled).
//   2. the coordinated restart: the version is applied (attempt + 1), every slot's pod is
//      deleted and recreated on the new image in the same round (the standbys stay in the
//      pool: using them for slots would not start the job sooner, the slowest new pod
//      decides, and would leave it without a pool). The agents of the new pods converge to
//      the new attempt as after any restart.
// A lazy update waits for the next failure-triggered restart (FinishRecovery applies it and
// the slots are recreated then), with its standbys prepared meanwhile; a rollback to a
// version with another image recreates the slots at once (training is already down).
//
// What survives: in-memory checkpoints live in the pods (the agent's store under
// /dev/shm, and the copies on peer slots, which are recreated too), so recreating every
// slot loses them. The restart resumes from the newest persisted step
// (status.checkpoint.lastPersistedStep, restored from persistPath by the new pods); the
// steps after it are redone and counted (the incident's stepsRedone for a failure-triggered
// one). An update the controller times waits, with a Warning event, while checkpoints are
// on and nothing is persisted: it would lose every step. With checkpoints off the restart
// resumes after the last completed step, as any restart (the script's own checkpoints).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/internal/decider.h"

namespace peregrine::decision_internal {
namespace {

// Both images are known and differ ("" is unknown: local mode, or a version without an
// image, which runs the template's).
bool Differ(const std::string& have, const std::string& want) {
  return !have.empty() && !want.empty() && have != want;
}

}  // namespace

const std::string& Decider::ActiveImage() const { return plan_.status.code.image; }

std::string Decider::StandbyImage() const {
  const JobStatus& st = plan_.status;
  if (st.pending_code && Differ(st.pending_code->image, st.code.image) &&
      ImageSwitchBlocker(*st.pending_code).empty()) {
    return st.pending_code->image;
  }
  return st.code.image;
}

bool Decider::SlotsNeedImage(const std::string& image) const {
  for (const SlotStatus& slot : plan_.status.slots) {
    const PodObservation* p = Pod(slot.pod);
    if (p != nullptr && Differ(p->image, image)) return true;
  }
  return false;
}

std::string Decider::ImageSwitchBlocker(const CodeVersionSpec& to) const {
  if (!spec_.checkpoint.enabled() || !SlotsNeedImage(to.image)) return "";
  if (plan_.status.checkpoint.last_persisted_step > 0) return "";
  return absl::StrFormat(
      "image %s needs new pods, and the in-memory checkpoints live in the pods: with no persisted step "
      "(spec.checkpoint.persistEverySteps %d) every step would be lost; it waits for a persisted step (or the "
      "next failure-triggered restart that can apply it)",
      to.image, spec_.checkpoint.persist_every_steps);
}

bool Decider::PoolReadyOn(const std::string& image) const {
  const JobStatus& st = plan_.status;
  if (st.standby_desired <= 0) return true;
  bool all_unschedulable = !st.standbys.empty();
  for (const StandbyStatus& sb : st.standbys) {
    const PodObservation* p = Pod(sb.pod);
    const AgentObservation* a = Agent(sb.pod);
    if (p != nullptr && p->running && !Differ(p->image, image) && a != nullptr && a->connected &&
        a->registered_as_standby && a->self_check_passed) {
      return true;
    }
    if (p == nullptr || p->waiting_reason.rfind("Unschedulable", 0) != 0) all_unschedulable = false;
  }
  return all_unschedulable;
}

void Decider::ReplaceStaleStandbys() {
  JobStatus& st = plan_.status;
  const std::string want = StandbyImage();
  std::vector<StandbyStatus> kept;
  std::string from;
  int replaced = 0;
  for (const StandbyStatus& sb : st.standbys) {
    const PodObservation* p = Pod(sb.pod);
    if (p == nullptr || !Differ(p->image, want)) {
      kept.push_back(sb);
      continue;
    }
    from = p->image;
    ++replaced;
    plan_.delete_pods.push_back(
        PodToDelete{sb.pod, absl::StrCat("image update: standby on ", p->image, ", the job's pods will run ", want)});
  }
  if (replaced == 0) return;
  st.standbys = std::move(kept);
  const bool preparing = want != st.code.image;
  Event(JobEventType::kNormal, "StandbyImageUpdated",
        absl::StrFormat("replace %d standby(s) on image %s with standbys on %s%s", replaced, from, want,
                        preparing ? absl::StrCat(" before the active pods move to it (code revision ",
                                                 st.pending_code->revision, ")")
                                  : ""));
}

void Decider::RecreateStaleSlots() {
  JobStatus& st = plan_.status;
  const std::string want = st.code.image;
  std::string from;
  int recreated = 0;
  // Active pods this round already asked for (a lost machine's replacement made before a
  // lazy update was applied) are created on the running version's image.
  for (PodToCreate& c : plan_.create_pods) {
    if (c.role == PodRole::kActive) c.image = want;
  }
  for (SlotStatus& slot : st.slots) {
    const PodObservation* p = Pod(slot.pod);
    if (p == nullptr || !Differ(p->image, want)) continue;
    from = p->image;
    ++recreated;
    plan_.delete_pods.push_back(
        PodToDelete{slot.pod, absl::StrCat("image update: runs ", p->image, ", the job runs ", want)});
    slot.pod = absl::StrCat(ActivePodName(job_.metadata.name, slot.index), "-", st.next_pod_serial++);
    slot.machine_id.clear();
    slot.observed = false;
    slot.node_unready_since = 0;
    slot.node_unready_step = 0;
    slot.node_unready_progress_at = 0;
    plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, slot.index, want});
  }
  if (recreated == 0) return;
  std::string resume = absl::StrFormat("the agents join attempt %d", st.attempt);
  if (st.attempt_started_at == now_) {
    // This round started the attempt on the old pods' memory; that memory goes with them.
    if (spec_.checkpoint.enabled()) {
      const uint64_t kept = st.checkpoint.last_persisted_step;
      if (st.resume_step > kept) {
        const uint64_t lost = st.resume_step - kept;
        st.resume_step = kept;
        st.last_completed_step = kept;
        st.max_completed_step = kept;
        st.checkpoint.last_complete_step = std::min(st.checkpoint.last_complete_step, kept);
        if (!st.version_history.empty() && st.version_history.back().applied_at == now_) {
          st.version_history.back().applied_at_step = kept;
        }
        if (Incident* inc = OpenIncident(); inc != nullptr && inc->decided_at == now_) {
          inc->resume_step = kept;
          inc->steps_redone = inc->step_at_failure - std::min(inc->step_at_failure, kept);
          inc->actions.push_back(absl::StrFormat(
              "recreate %d pods on image %s: the in-memory checkpoints go with the old pods, resume from %s",
              recreated, want, kept > 0 ? absl::StrCat("the persisted step ", kept) : std::string("scratch")));
        }
        resume = absl::StrFormat(
            "in-memory checkpoints go with the old pods: attempt %d resumes from %s (%d steps redone)", st.attempt,
            kept > 0 ? absl::StrCat("the persisted step ", kept) : std::string("scratch"), lost);
      } else {
        resume = absl::StrFormat("attempt %d resumes from the persisted step %d", st.attempt, st.resume_step);
      }
    } else {
      resume = absl::StrFormat("attempt %d resumes after step %d", st.attempt, st.resume_step);
    }
  }
  Event(JobEventType::kNormal, "ImageUpdated",
        absl::StrFormat("code revision %s: recreate %d active pod(s) on image %s (was %s); %s", st.code.revision,
                        recreated, want, from, resume));
}

}  // namespace peregrine::decision_internal
