// Decider: one round of DecideJob (decision_engine.h), its steps split by concern over
// decision_engine.cc (the round: observe, conditions, ETTR), decide_pods.cc (pods and the
// warm-standby pool), decide_triage.cc (progress, failure detection and triage, hangs,
// eviction), decide_diagnosis.cc (the stop-time diagnosis), decide_versions.cc (code
// versions: hot update, rollback), decide_convergence.cc (attempts, agent convergence) and
// decide_suspend.cc (spec.suspend and admission holds).
// Internal to controller/core. Pure: no clock, I/O or threads; one instance per round.
#ifndef PEREGRINE_CONTROLLER_CORE_INTERNAL_DECIDER_H_
#define PEREGRINE_CONTROLLER_CORE_INTERNAL_DECIDER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "controller/core/decision_engine.h"
#include "controller/core/hang_policy.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine::decision_internal {

inline constexpr int64_t kNanosPerSecond = 1'000'000'000;

// Drops the oldest entries beyond `max`.
template <typename T>
void TrimFront(std::vector<T>& v, size_t max) {
  if (v.size() > max) v.erase(v.begin(), v.begin() + static_cast<long>(v.size() - max));
}

// "rank R killed by signal S" / "rank R exited with code C".
std::string ExitText(const RankExit& e);

// A NaN / Inf loss or a loss spike: the numeric incidents.
inline bool IsNumeric(IncidentKind kind) { return kind == IncidentKind::kNaNLoss || kind == IncidentKind::kLossSpike; }

class Decider {
 public:
  Decider(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
          const DecisionConfig& config)
      : job_(job), spec_(job.spec), obs_(obs), now_(now), config_(config) {
    plan_.status = status;
    pods_.reserve(obs.pods.size());
    agents_.reserve(obs.agents.size());
    for (const PodObservation& p : obs.pods) pods_[p.name] = &p;
    for (const AgentObservation& a : obs.agents) agents_[a.pod] = &a;
  }

  JobPlan Run();
  const AgentObservation* Agent(const std::string& pod) const;
  const PodObservation* Pod(const std::string& pod) const;
  bool PodLost(const std::string& pod, bool observed, std::string* reason) const;
  Incident* OpenIncident();
  void Event(JobEventType type, const std::string& reason, const std::string& message);
  std::string PodAddress(const std::string& pod) const;
  std::string MasterAddr() const;
  void InitializeOnce();
  void ObserveMachines();
  void SizeStandbyPool();
  void ReplaceFailedStandbys();
  void EnsurePods();
  // Before an attempt starts: a slot whose pod was lost is created again.
  void RecreateLostPendingSlots();
  void ReplenishStandbys();
  void TearDownStandbys();
  // Pods the cluster shows for the job that are neither a slot nor a standby (an evicted
  // pod whose deletion failed, a leftover after a controller restart) are deleted.
  void DeleteOrphans();
  void MaybeStartFirstAttempt();
  void TrackProgress();
  void DetectAndTriage();
  // Runs the stack-aggregation policy (hangs, MFU drops) and merges its commands, events
  // and state; a detected hang opens its incident and holds the triage until the verdict.
  HangDecision RunHangPolicy(bool other_failure);
  // Ends the job as Failed on `inc` (no restart): the current version's outcome becomes
  // Failed, the Failed condition carries `reason` and `message`, training is stopped.
  void FailJob(Incident* inc, const std::string& reason, const std::string& message);
  // Counts the recovery unless `counted` is false (or gives up past maxRecoveries), applies
  // a pending lazy update and restarts every machine in place.
  void FinishRecovery(Incident* inc, bool rolled_back, bool counted = true);
  // One round of the stop-time diagnosis in progress; on its verdict, evict what failed or
  // escalate: reattempt in place -> roll back the last code update -> dual-phase replay.
  void AdvanceDiagnosis();
  // Makes `code` the running version (recorded in the bounded history) for the next attempt.
  void ApplyCode(CodeVersionSpec code, const std::string& reason);
  void Rollback(const CodeVersionSpec& target, Incident* inc, const std::string& why);
  // Hot update: the desired code (spec.codeVersion) differs from the running one. Urgent
  // (annotation peregrine.dev/hot-update: urgent) restarts in place now; otherwise it
  // waits for the next failure-triggered restart or hotUpdateWindowHours.
  void HotUpdate();
  // Images (decide_images.cc). The image of every slot's pod: the running version's.
  const std::string& ActiveImage() const;
  // The image new standbys get: a pending version's when it changes the image and the
  // switch may happen (ImageSwitchBlocker empty), else the running version's.
  std::string StandbyImage() const;
  // Some slot's pod runs an image other than `image` (both known): switching to it
  // recreates the active pods.
  bool SlotsNeedImage(const std::string& image) const;
  // Why the pods cannot be recreated for `to` now ("" when they can, or need not be).
  std::string ImageSwitchBlocker(const CodeVersionSpec& to) const;
  // The pool is ready on `image`: a ready standby runs it (none is desired, or every one
  // is unschedulable, and nothing is waited for).
  bool PoolReadyOn(const std::string& image) const;
  // Standbys on another image than StandbyImage() are deleted; ReplenishStandbys makes
  // their replacements on it.
  void ReplaceStaleStandbys();
  // Slots whose pod runs another image than the running version's get new pods on it;
  // in-memory checkpoints go with the old pods, so an attempt started this round resumes
  // from what outlives them (the persisted step).
  void RecreateStaleSlots();
  void EvictAndActivate(const std::vector<int>& lost_slots, Incident* inc);
  void StartNewAttempt(Incident* inc);
  void StopAll();
  std::string CommandId(const std::string& pod, uint64_t attempt) const;
  // Suspension (decide_suspend.cc): spec.suspend or the observation's admission hold.
  // True when the job is suspended this round (its pods are to be deleted; nothing else
  // of the lifecycle is decided).
  bool DecideSuspension();
  bool SavingBeforeSuspend();
  void SuspendNow(const std::string& reason, const std::string& message);
  void Resume();
  std::string ResumeText() const;
  void UpdateSuspendedCondition();
  // Every slot's agent runs the current attempt; one that does not gets a command with a
  // deterministic id (an agent that registered after the attempt began converges alone).
  void ConvergeAgents();
  void DetectSuccess();
  void FillDesiredAgents();
  void UpdateEttr();
  void UpdateConditions();
  // In-memory checkpoints (decide_checkpoint.cc): the placement, the complete and persisted
  // steps and the store's events; a no-op while spec.checkpoint.intervalSteps is 0.
  void ObserveCheckpoints();
  // The slots' store reports (nullptr: none yet), by slot.
  std::vector<const CheckpointReportObservation*> SlotReports() const;
  // The step a new attempt resumes after: the newest complete checkpoint when checkpoints
  // are on, or with `newest_restorable` the newest step every slot can restore now when
  // that is newer (progress of the attempt starts there; `inc` records it and the steps
  // redone), else the last step every rank completed.
  void SetResumePoint(Incident* inc, bool newest_restorable = true);
  // The newest step, not failed before, whose shards every slot can obtain now: its own
  // store while its agent is connected, else a copy a connected agent holds; 0: none.
  uint64_t NewestRestorableStep() const;
  // A numeric incident (NaN, loss spike) at once after a restore of a checkpoint (within
  // its interval, before a newer one completed): that step is marked failed and the
  // resume point falls back to an older complete one (or the persisted one, or scratch),
  // so the job does not loop on a bad state. True when it fell back (resume_step set).
  bool FallBackFromBadRestore(Incident* inc);
  // A slot's agent could not restore the resume step: restart from an older complete (or
  // the persisted) step, or fail the job when none is left. True when it acted.
  bool HandleRestoreFailure();
  // Every rank of the attempt exited non-zero before any progress with the same error
  // (a deterministic start-up failure): that error, else nullopt.
  std::optional<std::string> StartupFailure() const;

  const TrainingJob& job_;
  const TrainingJobSpec& spec_;
  const JobObservation& obs_;
  const int64_t now_;
  const DecisionConfig& config_;
  JobPlan plan_;
  // By name, pointing into obs_ (a later duplicate name wins).
  std::unordered_map<std::string_view, const PodObservation*> pods_;
  std::unordered_map<std::string_view, const AgentObservation*> agents_;
};

}  // namespace peregrine::decision_internal

#endif  // PEREGRINE_CONTROLLER_CORE_INTERNAL_DECIDER_H_
