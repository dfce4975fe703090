#include "controller/core/failslow_mitigation.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/failslow_validation.h"

// How the ladder decides (Falcon-Mitigate, with GUARD's thresholds as the S1 gate).
//
// The loss of staying. While a finding is open with severity >= mitigateThreshold, the
// job wastes, of every second of wall time, the fraction
//     w = (slow_iteration_seconds - healthy_iteration_seconds) / slow_iteration_seconds
// (severity / (1 + severity) when the iteration times are not both known): the share of
// each slow iteration that a healthy machine would not have spent. The record integrates
// w over wall time since the current strategy started (left Riemann sum over the rounds:
// the interval since the last round is charged at the rate in force at its start, which
// the record keeps, so a controller restart integrates exactly the same). Wall time and
// not steps, because the one-time costs it is compared with are measured in seconds of
// wall time (a restart's downtime plus redone steps), and because the loss keeps
// accruing even when steps are irregular. Below mitigateThreshold the rate is 0: S1
// ignores such a slowdown (it is recorded and watched only).
//
// The break-even rule. Let B be the next strategy's one-time cost and L(t) the loss
// accumulated t seconds after the current strategy started. The ladder switches at the
// first t* with L(t*) >= B. If the slowdown ends at T < t*, the ladder paid L(T) and the
// best offline choice (knowing T) pays min(L(T), B) = L(T): ratio 1. If T >= t*, the
// ladder paid L(t*) + B, which is B + B = 2B at the exact break-even (rounds add at most
// one round's rent), while the offline optimum is min(L(T), B) = B: ratio 2. No
// deterministic rule does better (the classic ski-rental lower bound). The new strategy
// starts with a fresh rent (its residual slowdown is charged against the next rung).
//
// GUARD's "replace" tier does not skip the rent: skipping it would pay B at once, and a
// slowdown that ends soon after detection would then cost B instead of its small L(T),
// unbounded ratio L(T) -> 0. The tier remains a label on the finding.
//
// S4 prerequisites: the finding is localized, its validation (training paused) is not in
// progress, it attributes machines of the job (compute and compute+communication: the
// slow ranks' machines; communication: only the machines of the GPUs the validation found
// slow, a congested link alone names no single machine to evict), and a restart cost is
// measured. While one is missing the ladder stays and reports why, once per reason.
//
// S4's evidence gate. An open finding is never re-localized by the profiles: it stays
// open while the job is slow, whatever makes it slow. When the GPU it was localized to
// recovers while another slowdown (a congested link elsewhere) keeps the job slow, the
// ladder would go on paying rent against the recovered machine and evict a healthy one.
// So at S4's break-even the ladder asks whether the attributed machines are still the
// slow ones: the evidence is the newest GEMM judged (validation or re-confirmation, its
// ended_at), and it must be at most evidence_max_age_ns old. Re-profiling cannot answer
// this while an S2 plan is in force: the plan gives the slow replica less work, so its
// rank stops arriving last. A GEMM can: it measures the GPU alone, training paused.
//  - stale or missing: gemm_wanted (a GEMM-only re-run of the validation on the same
//    machines, failslow_validation.h) and stay; the next rounds see it in progress, then
//    done and fresh. A re-confirmation that failed is asked again only after the bound
//    (at most one pause per bound);
//  - fresh, naming a slow GPU on some attributed machines: S4 evicts those machines only;
//  - fresh, naming none of them: refuted. The ladder stops and the finding is closed
//    (ApplyFailSlowPolicy: Recovered at now), not re-localized in place. Closing, because
//    the finding's content (its machines, its validation, its S2 plan's speeds and the
//    rent paid on its ladder) describes a cause that is gone; if the job is still slow,
//    the next round opens a new finding that is profiled and localized from scratch, with
//    its own command ids, validation and ladder, so the loss the gone cause accumulated is
//    not spent on evicting for a different one. Re-localizing in place would keep that
//    rent and the old validation's results under the same ids.
// MonitorOnly never acts, so it never asks for evidence (it reports the break-even as
// before). The bound keeps the rule cheap: S4 decided within it of the validation (the
// common case: a restart cheaper than a long S2) needs no second pause.

namespace peregrine {
namespace {

constexpr double kNanos = 1e9;

const char* Rung(MitigationStrategy s) {
  switch (s) {
    case MitigationStrategy::kIgnore: return "S1 ignore";
    case MitigationStrategy::kRedistribute: return "S2 redistribute";
    case MitigationStrategy::kRemap: return "S3 remap";
    case MitigationStrategy::kReplace: return "S4 replace";
  }
  return "?";
}

double WastedFraction(const FailSlowFinding& f, double measured_iteration_seconds = 0) {
  if (measured_iteration_seconds > 0 && f.healthy_iteration_seconds > 0) {
    return std::max(0.0, (measured_iteration_seconds - f.healthy_iteration_seconds) / measured_iteration_seconds);
  }
  if (f.healthy_iteration_seconds > 0 && f.slow_iteration_seconds > f.healthy_iteration_seconds) {
    return (f.slow_iteration_seconds - f.healthy_iteration_seconds) / f.slow_iteration_seconds;
  }
  return f.severity > 0 ? f.severity / (1 + f.severity) : 0;
}

// A GEMM of the validation (or a re-confirmation) was judged: the run is done with a
// verdict from its measurements.
bool GemmJudged(const FailSlowValidation& v) {
  return v.state == ValidationState::kDone && v.ended_at > 0 &&
         (v.verdict == ValidationVerdict::kConfirmed || v.verdict == ValidationVerdict::kNotConfirmed);
}

// The machines S4 would evict, or why there are none.
std::vector<std::string> AttributedMachines(const FailSlowMitigationInput& in, std::string* why) {
  const FailSlowFinding& f = in.finding;
  std::vector<int> ranks;
  switch (f.kind) {
    case FailSlowKind::kUnlocalized:
      *why = "not localized yet";
      return {};
    case FailSlowKind::kCompute:
    case FailSlowKind::kComputeAndCommunication:
      ranks = f.ranks;
      break;
    case FailSlowKind::kCommunication:
      if (f.validation.verdict == ValidationVerdict::kConfirmed) ranks = f.validation.slow_gpus;
      if (ranks.empty()) {
        *why = absl::StrCat("communication fail-slow of ", f.group.empty() ? "a group" : f.group,
                            ": no machine is attributed (a congested link is shared by its machines)");
        return {};
      }
      break;
  }
  if (ranks.empty()) {
    *why = "the finding names no rank";
    return {};
  }
  std::vector<std::string> machines;
  for (int r : ranks) {
    auto it = in.rank_machines.find(r);
    if (it == in.rank_machines.end() || it->second.empty()) {
      *why = absl::StrFormat("the machine of rank %d is unknown", r);
      return {};
    }
    if (std::find(in.job_machines.begin(), in.job_machines.end(), it->second) == in.job_machines.end()) {
      *why = absl::StrFormat("machine %s (rank %d) is no longer in the job", it->second, r);
      return {};
    }
    if (std::find(machines.begin(), machines.end(), it->second) == machines.end()) machines.push_back(it->second);
  }
  return machines;
}

}  // namespace

RestartCost MeasureRestartCost(const JobStatus& status, double iteration_seconds) {
  const double iter = iteration_seconds > 0 ? iteration_seconds : status.mean_iteration_seconds;
  std::vector<double> costs;
  uint64_t redone = 0;
  for (const Incident& i : status.incidents) {
    // Restarted and resumed: an incident judged a false signal has no actions.
    if (i.decided_at == 0 || i.resumed_at <= i.detected_at || i.actions.empty()) continue;
    costs.push_back(static_cast<double>(i.resumed_at - i.detected_at) / kNanos +
                    static_cast<double>(i.steps_redone) * std::max(0.0, iter));
    redone += i.steps_redone;
  }
  RestartCost out;
  if (!costs.empty()) {
    std::sort(costs.begin(), costs.end());
    const size_t n = costs.size();
    out.seconds = n % 2 == 1 ? costs[n / 2] : (costs[n / 2 - 1] + costs[n / 2]) / 2;
    out.source = absl::StrFormat(
        "median of the job's %d recovered incident(s): detection -> first step after the restart, plus the "
        "steps redone (%d in all) x %.3f s",
        n, redone, iter);
    return out;
  }
  if (status.first_step_seconds > 0) {
    // A restart now also redoes the steps since the newest complete checkpoint.
    const uint64_t done = status.last_completed_step;
    const uint64_t restored = status.checkpoint.last_complete_step;
    const uint64_t redo = restored > 0 && done > restored ? done - restored : 0;
    out.seconds = status.first_step_seconds + static_cast<double>(redo) * std::max(0.0, iter);
    out.source = absl::StrFormat(
        "the job's measured start-up (attempt 1's start -> its first completed step, %.2f s) plus the %d step(s) "
        "since the newest complete checkpoint x %.3f s",
        status.first_step_seconds, redo, iter);
  }
  return out;
}

FailSlowMitigationDecision DecideFailSlowMitigation(const FailSlowMitigationInput& in, int64_t now) {
  FailSlowMitigationDecision d;
  const FailSlowFinding& f = in.finding;
  FailSlowMitigationRecord& r = d.record;
  r = f.mitigation;
  if (r.stopped_at != 0) return d;
  if (r.strategy_started_at == 0 && f.ended_at != 0) return d;  // ended before the ladder saw it
  const bool monitor_only = in.spec.mitigation == FailSlowMitigation::kMonitorOnly;
  auto event = [&](JobEventType type, const std::string& reason, const std::string& text) {
    d.events.push_back(JobEvent{type, reason, absl::StrFormat("fail-slow #%d: %s", f.id, text)});
  };

  if (r.strategy_started_at == 0) {
    const int64_t start = f.detected_at > 0 && f.detected_at <= now ? f.detected_at : now;
    r.strategy = MitigationStrategy::kIgnore;
    r.strategy_started_at = start;
    r.accounted_until = start;
    event(JobEventType::kNormal, "FailSlowMitigation",
          absl::StrFormat("mitigation ladder (%s) on %s: severity +%.0f%% (mitigateThreshold +%.0f%%); the loss of "
                          "staying is accumulated and compared with the next strategy's one-time cost",
                          FailSlowMitigationName(in.spec.mitigation), Rung(r.strategy), f.severity * 100,
                          in.spec.mitigate_threshold * 100));
  }

  // Integrate the loss up to now (or the end of the slowdown) at the rate in force.
  const int64_t end = f.ended_at != 0 ? std::min(now, std::max(f.ended_at, r.accounted_until)) : now;
  if (end > r.accounted_until) {
    r.loss_seconds += r.loss_rate * static_cast<double>(end - r.accounted_until) / kNanos;
    r.accounted_until = end;
  }
  // Past S1 with the strategy's effect measured, the residual slowdown is what stays.
  const double measured = r.strategy != MitigationStrategy::kIgnore ? in.measured_iteration_seconds : 0;
  const double severity = measured > 0 && f.healthy_iteration_seconds > 0
                              ? measured / f.healthy_iteration_seconds - 1
                              : f.severity;
  const bool above = severity >= in.spec.mitigate_threshold;
  r.loss_rate = above ? WastedFraction(f, measured) : 0;

  if (f.ended_at != 0) {
    r.stopped_at = now;
    r.loss_rate = 0;
    event(JobEventType::kNormal, "FailSlowMitigationStopped",
          absl::StrFormat("the slowdown ended: the ladder stops on %s after %.2f s of accumulated loss", Rung(r.strategy),
                          r.loss_seconds));
    return d;
  }
  if (r.strategy == MitigationStrategy::kReplace) return d;  // the decision engine carries it out

  auto wait = [&](const std::string& why) {
    if (why == r.blocker) return;
    r.blocker = why;
    if (!why.empty()) {
      event(JobEventType::kNormal, "FailSlowMitigationWaiting",
            absl::StrFormat("staying on %s (%.2f s of loss so far): %s", Rung(r.strategy), r.loss_seconds, why));
    }
  };
  if (!above) {
    wait(absl::StrFormat("severity +%.0f%% is below mitigateThreshold +%.0f%%: recorded and watched", severity * 100,
                         in.spec.mitigate_threshold * 100));
    return d;
  }

  // The next available strategy above the current one; unavailable ones reported once.
  struct Candidate {
    MitigationStrategy strategy;
    const StrategyAvailability* availability;
  };
  const Candidate middle[] = {{MitigationStrategy::kRedistribute, &in.redistribute},
                              {MitigationStrategy::kRemap, &in.remap}};
  MitigationStrategy next = MitigationStrategy::kReplace;
  double cost = in.restart_cost.seconds;
  std::string source = in.restart_cost.source;
  for (const Candidate& c : middle) {
    if (c.strategy <= r.strategy) continue;
    if (c.availability->available) {
      next = c.strategy;
      cost = c.availability->cost_seconds;
      source = c.availability->cost_source;
      break;
    }
    if (std::find(r.reported_unavailable.begin(), r.reported_unavailable.end(), c.strategy) ==
        r.reported_unavailable.end()) {
      r.reported_unavailable.push_back(c.strategy);
      event(JobEventType::kNormal, "FailSlowMitigationUnavailable",
            absl::StrFormat("%s unavailable for this job: %s", Rung(c.strategy), c.availability->unavailable_reason));
    }
  }
  std::vector<std::string> machines;
  // A communication finding whose GEMM never ran (its validation was deferred): S4 may
  // still evict a GPU that GEMM finds slow, so at the break-even it asks for one.
  bool gemm_never_ran = false;
  if (next == MitigationStrategy::kReplace) {
    std::string why;
    if (f.state != FailSlowState::kLocalized) {
      why = "not localized yet";
    } else if (ValidationInProgress(f.validation)) {
      why = "its validation (training paused) is in progress";
    } else {
      machines = AttributedMachines(in, &why);
      gemm_never_ran = machines.empty() && !monitor_only && f.kind == FailSlowKind::kCommunication &&
                       !GemmJudged(f.validation);
    }
    if (machines.empty() && !gemm_never_ran) {
      wait(absl::StrCat(Rung(next), " needs the slow machine: ", why));
      return d;
    }
  }
  if (cost <= 0) {
    wait(absl::StrCat(Rung(next), "'s one-time cost is not measured yet (no recovered incident, no completed "
                                  "first step): not escalating"));
    return d;
  }
  r.cost_seconds = cost;
  r.cost_source = source;
  if (r.loss_seconds < cost) {
    wait("");
    return d;
  }
  if (next == MitigationStrategy::kReplace && !monitor_only) {
    // The evidence gate (see the top of this file): S4 evicts only machines a GEMM judged
    // at most evidence_max_age_ns ago names.
    const FailSlowValidation& v = f.validation;
    const double max_age_s = static_cast<double>(in.evidence_max_age_ns) / kNanos;
    const bool fresh = GemmJudged(v) && now - v.ended_at <= in.evidence_max_age_ns;
    if (!fresh) {
      if (v.state == ValidationState::kDone && v.verdict == ValidationVerdict::kFailed && v.ended_at > 0 &&
          now - v.ended_at <= in.evidence_max_age_ns) {
        // One pause per bound at most: a GEMM that cannot run is not retried every round.
        wait(absl::StrFormat("%s needs a GEMM at most %.0f s old naming the machine: the last one failed (%s); it "
                             "is asked for again %.0f s after it ended",
                             Rung(next), max_age_s, v.detail, max_age_s));
        return d;
      }
      d.gemm_wanted = true;
      wait(gemm_never_ran
               ? absl::StrFormat("%s break-even reached on a communication finding whose GEMM never ran: asking "
                                 "for one (a GPU it finds slow is evicted, a congested link alone is not)",
                                 Rung(next))
               : absl::StrFormat("%s break-even reached on evidence %s: asking for a GEMM re-confirmation of "
                                 "machine(s) %s before evicting",
                                 Rung(next),
                                 GemmJudged(v) ? absl::StrFormat("older than the %.0f s bound (its GEMM ended "
                                                                 "%.0f s after detection)",
                                                                 max_age_s,
                                                                 static_cast<double>(v.ended_at - f.detected_at) / kNanos)
                                               : std::string("that no GEMM measured"),
                                 absl::StrJoin(machines, ",")));
      return d;
    }
    // Fresh: keep the attributed machines on which the GEMM measured a slow GPU.
    std::vector<std::string> named;
    for (const std::string& m : machines) {
      for (int rank : v.slow_gpus) {
        auto it = in.rank_machines.find(rank);
        if (it != in.rank_machines.end() && it->second == m) {
          named.push_back(m);
          break;
        }
      }
    }
    if (named.empty()) {
      // Refuted: the slow GPU the attribution rested on measures like its peers now.
      d.refuted = true;
      d.refuted_reason = absl::StrFormat(
          "the GEMM of %.0f s ago names no slow GPU on machine(s) %s (%s): the attributed machine is not the slow "
          "one any more; closing the finding instead of evicting it",
          static_cast<double>(now - v.ended_at) / kNanos, absl::StrJoin(machines, ","), v.detail);
      r.stopped_at = now;
      r.loss_rate = 0;
      r.blocker.clear();
      r.detail = d.refuted_reason;
      event(JobEventType::kWarning, "FailSlowAttributionRefuted",
            absl::StrFormat("%s not taken after %.2f s of loss on %s: %s", Rung(next), r.loss_seconds,
                            Rung(r.strategy), d.refuted_reason));
      return d;
    }
    machines = std::move(named);
  }
  const std::string figures = absl::StrFormat(
      "severity +%.0f%% (iteration %.1f ms -> %.1f ms, %.0f%% of wall time wasted); accumulated loss %.2f s on %s "
      "since %.1f s >= %s's one-time cost %.2f s (%s)",
      severity * 100, f.healthy_iteration_seconds * 1e3, measured > 0 ? measured * 1e3 : f.slow_iteration_seconds * 1e3,
      WastedFraction(f, measured) * 100,
      r.loss_seconds, Rung(r.strategy), static_cast<double>(now - r.strategy_started_at) / kNanos, Rung(next), cost,
      source);
  const std::string what = next == MitigationStrategy::kReplace
                               ? absl::StrCat("evict machine(s) ", absl::StrJoin(machines, ","))
                               : std::string(Rung(next));
  if (monitor_only) {
    if (r.break_even_at == 0) {
      r.break_even_at = now;
      r.detail = figures;
      event(JobEventType::kWarning, "FailSlowMitigation",
            absl::StrFormat("break-even reached: Auto would move to %s (%s); mitigation MonitorOnly: no action. %s",
                            Rung(next), what, figures));
    }
    wait("mitigation MonitorOnly: reported, never acted on");
    return d;
  }
  if (r.break_even_at == 0) r.break_even_at = now;
  r.strategy = next;
  r.strategy_started_at = now;
  r.accounted_until = now;
  r.loss_seconds = 0;
  r.blocker.clear();
  r.detail = absl::StrCat(what, ": ", figures);
  if (next == MitigationStrategy::kReplace) r.replace_machines = machines;
  d.actions.push_back(MitigationAction{next, machines, figures});
  event(JobEventType::kWarning, "FailSlowMitigation", absl::StrCat(Rung(next), ": ", r.detail));
  return d;
}

std::optional<FailSlowReplacement> PendingFailSlowReplacement(const JobStatus& status, uint64_t open_incident_id) {
  for (auto it = status.fail_slows.rbegin(); it != status.fail_slows.rend(); ++it) {
    const FailSlowMitigationRecord& r = it->mitigation;
    if (it->ended_at != 0 || r.strategy != MitigationStrategy::kReplace || r.replace_machines.empty()) continue;
    if (r.incident_id != 0 && r.incident_id != open_incident_id) continue;
    FailSlowReplacement out;
    out.finding_id = it->id;
    out.incident_id = r.incident_id;
    out.reason = absl::StrFormat("fail-slow #%d, ladder %s", it->id, r.detail);
    const std::set<std::string> wanted(r.replace_machines.begin(), r.replace_machines.end());
    for (const SlotStatus& slot : status.slots) {
      if (!slot.machine_id.empty() && wanted.count(slot.machine_id)) out.slots.push_back(slot.index);
    }
    if (out.slots.empty()) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

}  // namespace peregrine
