#include "fleetsim/sim_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/decision_engine.h"
#include "fleetsim/sim_cluster.h"
#include "fleetsim/sim_event.h"
#include "fleetsim/sim_ledger.h"

// The loop: at time `now`, account the time since the last step to the ledger's state,
// run the cluster's events due now, decide when something changed (or the plan or the
// resync asked), then settle training: a new attempt in the status stops training and
// rewinds progress to its resume step; the job trains while every slot runs the current
// attempt on a working machine, at the step time grown by the slots' worst fail-slow
// plus the per-step share of blocking checkpoint saves. While it does not train, the time
// goes to waiting (a slot's pod has no machine), restart (the attempt has not trained
// yet: start-up, pods, convergence, restore), diagnosis (an incident is open: triage
// window, stop-time diagnosis) or detection (the fault is not yet seen). Then jump to the
// next event, wake-up or resync.

namespace peregrine::fleetsim {
namespace {

uint32_t StepsPer(double interval_s, double step_s) {
  return static_cast<uint32_t>(std::max(1.0, std::round(interval_s / step_s)));
}

bool Terminal(JobPhase phase) { return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed; }

absl::Status ValidateFaults(const std::vector<FaultEvent>& faults, int fleet) {
  for (size_t i = 0; i < faults.size(); ++i) {
    const FaultEvent& f = faults[i];
    if (f.machine < 0 || f.machine >= fleet) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fault %d: machine %d is outside the fleet's 0..%d", i, f.machine, fleet - 1));
    }
    if (f.start_ns < 0 || f.end_ns < f.start_ns) {
      return absl::InvalidArgumentError(absl::StrFormat("fault %d: interval [%d, %d) ns is not a forward interval",
                                                        i, f.start_ns, f.end_ns));
    }
    const bool slow = f.kind == FaultKind::kSlowCompute || f.kind == FaultKind::kSlowLink;
    if (slow && !(f.severity > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat("fault %d: a fail-slow needs severity > 0", i));
    }
  }
  return absl::OkStatus();
}

// What the run has counted of each fail-slow finding (by id).
struct SeenFinding {
  bool localized = false;
  bool validated = false;
  uint64_t plans = 0;
  bool replaced = false;
};

// Counts the findings of the status not counted yet: opened, localized (by kind),
// validated, S2 plans sent, S4 decided. The status keeps at most kMaxFailSlowFindings;
// the engine looks after every decision, so none is missed.
void CountFailSlows(const JobStatus& status, std::map<uint64_t, SeenFinding>* seen, SimResult* result) {
  for (const FailSlowFinding& f : status.fail_slows) {
    auto [it, added] = seen->try_emplace(f.id);
    SeenFinding& s = it->second;
    if (added) ++result->failslow_findings;
    if (!s.localized && f.state != FailSlowState::kProfiling && f.kind != FailSlowKind::kUnlocalized) {
      s.localized = true;
      ++result->failslow_localized;
      if (f.kind == FailSlowKind::kCompute) ++result->failslow_compute;
      if (f.kind == FailSlowKind::kCommunication) ++result->failslow_communication;
      if (f.kind == FailSlowKind::kComputeAndCommunication) {
        ++result->failslow_compute;
        ++result->failslow_communication;
      }
    }
    if (!s.validated && f.validation.verdict == ValidationVerdict::kConfirmed) {
      s.validated = true;
      ++result->failslow_confirmed;
    }
    const uint64_t plans = static_cast<uint64_t>(std::max(0, f.mitigation.microbatch_plan.plans));
    if (plans > s.plans) {
      result->failslow_s2_plans += static_cast<int64_t>(plans - s.plans);
      s.plans = plans;
    }
    if (!s.replaced && f.mitigation.strategy == MitigationStrategy::kReplace) {
      s.replaced = true;
      ++result->failslow_s4;
    }
  }
}

}  // namespace

std::string_view VariantPolicyName(PeregrineVariant variant) {
  switch (variant) {
    case PeregrineVariant::kFull: return "peregrine";
    case PeregrineVariant::kStandbyNoMemoryCheckpoint: return "standby-no-memory-ckpt";
    case PeregrineVariant::kNoFailSlowMitigation: return "no-failslow-mitigation";
  }
  return "unknown";
}

int FleetMachines(const JobShape& shape, const SimOptions& options) {
  const int machines = shape.machines();
  const int spares = options.spare_machines >= 0 ? options.spare_machines
                                                 : std::max(16, static_cast<int>(std::ceil(machines * 0.05)));
  return machines + spares;
}

TrainingJob SimulatedJob(const JobShape& shape, const CostModel& costs, const SimOptions& options) {
  TrainingJob job;
  job.metadata.name = "sim";
  job.metadata.namespace_ = "default";
  job.metadata.generation = 1;
  TrainingJobSpec& spec = job.spec;
  spec.machines = shape.machines();
  spec.gpus_per_machine = shape.gpus_per_machine;
  // Tensor parallel inside a machine; pipeline stages across machines (the largest of 16,
  // 8, 4, 2 that divides the machines and leaves two data-parallel replicas), data
  // parallel across the stages' replicas. With one stage every machine shares every
  // data-parallel group and no checkpoint backup can avoid its groups.
  int pipeline = 1;
  for (int p : {16, 8, 4, 2}) {
    if (shape.machines() % p == 0 && shape.machines() / p >= 2) {
      pipeline = p;
      break;
    }
  }
  spec.parallelism.tensor = shape.gpus_per_machine;
  spec.parallelism.pipeline = pipeline;
  spec.parallelism.data = shape.machines() / pipeline;
  spec.code.image = "simulated";
  spec.code.command = {"train"};
  spec.standby.daily_failure_rate = std::clamp(options.standby_daily_failure_rate, 0.0, 1.0);
  spec.standby.min = std::max(0, options.standby_min);
  spec.standby.max = std::max(spec.standby.max, spec.standby.min);
  spec.fault_tolerance.max_recoveries = std::numeric_limits<int>::max();
  if (options.variant == PeregrineVariant::kStandbyNoMemoryCheckpoint) {
    spec.checkpoint.interval_steps = static_cast<int>(StepsPer(costs.disk_checkpoint_interval_s, shape.step_time_s));
    spec.checkpoint.backup_copies = 0;
  } else {
    spec.checkpoint.interval_steps = static_cast<int>(StepsPer(costs.memory_checkpoint_interval_s, shape.step_time_s));
    spec.checkpoint.backup_copies = 1;
  }
  if (options.variant == PeregrineVariant::kNoFailSlowMitigation) {
    spec.fail_slow.mitigation = FailSlowMitigation::kMonitorOnly;
  }
  return job;
}

absl::StatusOr<SimResult> SimulatePeregrine(const JobShape& shape, const CostModel& costs,
                                            const std::vector<FaultEvent>& faults, const SimOptions& options) {
  if (absl::Status s = ValidateJobShape(shape); !s.ok()) return s;
  if (absl::Status s = ValidateCostModel(costs); !s.ok()) return s;
  if (options.spare_machines < -1) return absl::InvalidArgumentError("spare_machines: must be >= 0 (or -1: default)");
  if (!(options.resync_s >= 0)) return absl::InvalidArgumentError("resync_s: must be >= 0");
  const int fleet = FleetMachines(shape, options);
  if (absl::Status s = ValidateFaults(faults, fleet); !s.ok()) return s;

  const TrainingJob job = SimulatedJob(shape, costs, options);
  const bool memory = options.variant != PeregrineVariant::kStandbyNoMemoryCheckpoint;
  const uint32_t interval = static_cast<uint32_t>(job.spec.checkpoint.interval_steps);
  const double checkpoint_per_step =
      (memory ? costs.memory_checkpoint_save_s : costs.disk_checkpoint_save_s) / static_cast<double>(interval);

  EventQueue queue;
  SimClusterOptions cluster_options;
  cluster_options.job_machines = shape.machines();
  cluster_options.fleet_machines = fleet;
  cluster_options.gpus_per_machine = shape.gpus_per_machine;
  cluster_options.costs = costs;
  cluster_options.restore_from_memory = memory;
  cluster_options.checkpoint_interval_steps = interval;
  cluster_options.backed_up = job.spec.checkpoint.backup_copies > 0;
  cluster_options.tensor = job.spec.parallelism.tensor;
  cluster_options.pipeline = job.spec.parallelism.pipeline;
  cluster_options.data = job.spec.parallelism.data;
  cluster_options.step_time_s = shape.step_time_s;
  cluster_options.verify_threshold = job.spec.fail_slow.verify_threshold;
  SimCluster cluster(cluster_options, faults, &queue);
  TimeLedger ledger(shape.step_time_s);
  const DecisionConfig config;

  SimResult result;
  result.policy = std::string(VariantPolicyName(options.variant));
  JobStatus status;
  const int64_t end = SecondsToNs(shape.days * 86400.0);
  const int64_t resync = SecondsToNs(options.resync_s);
  int64_t now = 0;
  int64_t wake = 0;  // decide at the start
  int64_t next_resync = resync > 0 ? 0 : std::numeric_limits<int64_t>::max();
  uint64_t trained_attempt = 0;
  bool attempt_trained = false;
  bool training = false;
  int64_t stopped_at = -1;  // training stopped by a fault at this time (a recovery is due)
  double held_machine_s = 0;
  int64_t held_since = 0;
  std::map<uint64_t, SeenFinding> seen_findings;

  for (;;) {
    ledger.AdvanceTo(now);
    held_machine_s += NsToSeconds(now - held_since) * cluster.MachinesHeld();
    held_since = now;
    while (!queue.Empty() && queue.NextAt() <= now) cluster.OnEvent(queue.Pop(), now);
    // The agents' iteration times, as they trained since the last step of the loop.
    cluster.TrackSlowdown(training ? cluster.SlotSlowdown(status) : 0, status.attempt, training, now);

    if (cluster.changed() || now == wake || now >= next_resync) {
      const JobObservation& obs = cluster.Observe(now, status.attempt, ledger.CompletedSteps(), ledger.StepSeconds());
      const int64_t unix_now = SimToUnix(now);
      const uint64_t attempt_before = status.attempt;
      JobPlan plan = DecideJob(job, status, obs, unix_now, config);
      ++result.decisions;
      for (const Eviction& e : plan.status.evicted) {
        if (e.at != unix_now) continue;
        ++result.evictions;
        if (!cluster.MachineFaulty(e.machine_id, now)) ++result.false_evictions;
      }
      if (attempt_before > 0) {
        for (const PodToCreate& c : plan.create_pods) {
          if (c.role == PodRole::kActive) ++result.standby_exhaustions;
        }
      }
      if (options.event_log != nullptr) {
        for (const JobEvent& e : plan.events) {
          options.event_log->push_back(absl::StrFormat("%.3f %s: %s", NsToSeconds(now), e.reason, e.message));
        }
      }
      cluster.Apply(&plan, now);
      status = std::move(plan.status);
      CountFailSlows(status, &seen_findings, &result);
      wake = plan.requeue_after_ns > 0 ? now + plan.requeue_after_ns : -1;
      if (resync > 0) next_resync = now + resync;
    }

    // Training follows the status and the cluster.
    if (status.attempt != trained_attempt) {
      if (trained_attempt > 0) ++result.restarts;
      training = false;
      ledger.Rewind(status.resume_step);
      trained_attempt = status.attempt;
      attempt_trained = false;
    }
    const bool ready = !Terminal(status.phase) && cluster.SlotsReady(status, now);
    if (training && !ready) {
      training = false;
      stopped_at = now;
    } else if (!training && ready) {
      training = true;
      attempt_trained = true;
      if (stopped_at >= 0) {
        ++result.recoveries;
        result.recovery_s += NsToSeconds(now - stopped_at);
        stopped_at = -1;
      }
    }
    if (training && cluster.Paused()) {
      // A fail-slow validation holds NCCL trapped: no progress, charged to diagnosis.
      ledger.SetState(LedgerState::kDiagnosis);
    } else if (training) {
      const double slow = cluster.SlotSlowdown(status);
      const bool started = ledger.state() != LedgerState::kTraining;
      ledger.SetRate(slow, checkpoint_per_step);
      ledger.SetState(LedgerState::kTraining);
      if (started) {
        queue.Push(ledger.TimeOfStep(ledger.CompletedSteps() + 1), SimEventKind::kFirstStep, 0,
                   static_cast<int64_t>(trained_attempt));
      }
    } else if (cluster.SlotWaitingForMachine(status)) {
      ledger.SetState(LedgerState::kWaiting);
    } else if (!attempt_trained) {
      ledger.SetState(LedgerState::kRestart);
    } else if (status.phase == JobPhase::kRecovering || status.triage_deadline != 0 || status.diagnosis) {
      ledger.SetState(LedgerState::kDiagnosis);
    } else {
      ledger.SetState(LedgerState::kDetection);
    }

    int64_t next = end;
    if (!queue.Empty()) next = std::min(next, queue.NextAt());
    if (wake > now) next = std::min(next, wake);
    next = std::min(next, next_resync);
    if (next >= end) break;
    now = std::max(next, now + 1);
  }
  ledger.AdvanceTo(end);
  held_machine_s += NsToSeconds(end - held_since) * cluster.MachinesHeld();
  ledger.Fill(&result);
  result.faults = cluster.faults_hitting_job();
  result.fail_stops = cluster.fail_stops_hitting_job();
  result.fail_slows = cluster.fail_slows_hitting_job();
  const double kept_gpu_s = result.kept_s * shape.gpus;
  const double held_gpu_s = held_machine_s * shape.gpus_per_machine;
  result.goodput = held_gpu_s > 0 ? kept_gpu_s / held_gpu_s : 0;
  return result;
}

}  // namespace peregrine::fleetsim
