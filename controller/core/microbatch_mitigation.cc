#include "controller/core/microbatch_mitigation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/microbatch_plan.h"

// How S2 is measured and kept.
//
// Speeds. Data-parallel training is synchronous: every rank completes a step at the same
// time, so a rank's iteration time is the job's step time whatever its own speed, and
// "iteration time / micro-batches" would give every replica the same speed. What differs
// is how long each replica waits for the others: the fast replicas reach the step's
// data-parallel gradient reduction early and wait in it for the slowest. So, per rank r,
// from its profile of its data-parallel communicator (profiling is on while a fail-slow
// is open, and while a plan is in force), the waiting share
//     w_r = sum of (exit - enter) over its newest `wait_collectives` DP collectives
//           / (exit of the newest - exit of the one before them)
// (one host's clock each: only the rank's own times are combined), and per replica d
//     busy_d = max over d's ranks of mean iteration seconds x (1 - max over d's ranks of w_r)
//     t_d    = busy_d / m_d
// where m_d is the micro-batches d's ranks ran (their mb=). busy_d is the time the
// replica spends on its own micro-batches (compute, and its tensor/pipeline traffic, a
// congested link inside the replica included); the reduction's transfer is common to
// every replica and drops out of the comparison. The maximum, not the minimum: with
// pipeline stages, a healthy replica's idle time shows up as data-parallel waiting on
// only some of its ranks (the stage whose reduction waits for the straggler); its other
// stages then wait in pipeline receives for that stage, which are not data-parallel
// collectives. Measured on the local cluster (TP=1 PP=2 DP=4, one GPU 3x slower): the
// minimum saw a healthy replica waiting 20% of the step, its stage-0 rank ~60%. The
// straggler's replica waits little on every rank, so the maximum stays small there.
//
// M. The global micro-batches per step is what the ranks report: the sum over the
// replicas of one rank's mb= each (every rank of a replica runs the same share; when they
// differ a plan is taking effect and nothing is measured that round).
//
// from_step. The observation is up to one heartbeat old and the command takes a round and
// a stream write to reach the agents, `delivery_seconds` in all; the ranks read their
// share at the start of each step. A plan decided after max_step must not apply to a step
// any rank may already have started when its agent writes the file: from_step = max_step
// + max(2, 1 + ceil(delivery_seconds / iteration_seconds)). (The step after max_step may
// be running already, hence at least 2.)
//
// Cost (ski-rental). Switching to S2 costs the steps until from_step, run at the slow
// rate: (from_step - max_step) x the current iteration time. That is a computation on the
// current measurements; once a plan has been applied for the job, the measured time from
// its decision to every rank running it replaces it. After S2 the ladder charges the
// residual slowdown (the measured iteration time under the plan against the healthy one)
// against S4's cost.
//
// Re-solving. Once every rank runs the plan (each reports its replica's count) and the
// job has completed `verify_window_steps` steps past from_step, the speeds are measured
// again and EvaluateMicroBatchReplan decides: a new plan (new id, new from_step) when the
// predicted step improves by more than spec.verify_threshold; withdrawn when the optimum is
// the even split again. So a plan changes at most once per window.
//
// Withdrawal. The empty plan goes to every active agent when the job restarts (a new
// attempt: its agents removed the plan file at launch anyway), when an agent refused the
// plan, and when the finding ended and the measured speeds no longer favour the plan over
// the even split by more than verify_threshold. The end of the finding alone is not taken
// as the end of the slowdown: the plan itself shortens the iteration, and when it changes
// the number of point-to-point calls per step it changes the ranks' collective pattern,
// which restarts the agents' detectors and closes their open slowdown (agent/
// failslow_monitor.h); clearing then would bring the slowdown back under a detector
// calibrated on it. When the speeds can no longer be measured after the end, the plan is
// withdrawn.

namespace peregrine {
namespace {

bool Active(const AgentObservation& a, uint64_t attempt) {
  return a.connected && !a.registered_as_standby && attempt > 0 && a.attempt == attempt;
}

std::string Counts(const std::vector<int64_t>& v) { return absl::StrCat("{", absl::StrJoin(v, ","), "}"); }

std::string MsList(const std::vector<double>& v) {
  std::vector<std::string> s;
  for (double x : v) s.push_back(absl::StrFormat("%.2f", x * 1e3));
  return absl::StrCat("{", absl::StrJoin(s, ","), "} ms");
}

// The even split of M over n replicas: M / n each, the first M mod n one more.
std::vector<int64_t> EvenSplit(int64_t m, size_t n) {
  std::vector<int64_t> out(n, n == 0 ? 0 : m / static_cast<int64_t>(n));
  for (size_t i = 0; n > 0 && i < static_cast<size_t>(m % static_cast<int64_t>(n)); ++i) ++out[i];
  return out;
}

double Threshold(const FailSlowSpec& spec) {
  return std::isfinite(spec.verify_threshold) ? std::clamp(spec.verify_threshold, 0.0, 0.99) : 0.10;
}

std::string PlanCommandId(const std::string& job, uint64_t plan_id, const std::string& pod) {
  return absl::StrCat(job, "-mbplan-", plan_id, "-", pod);
}

std::string ClearCommandId(const std::string& job, uint64_t plan_id, const std::string& pod) {
  return absl::StrCat(job, "-mbplan-", plan_id, "-clear-", pod);
}

bool Known(const AgentObservation& a, const std::string& id) {
  return a.command_results.count(id) || a.failed_commands.count(id) ||
         std::find(a.pending_command_ids.begin(), a.pending_command_ids.end(), id) != a.pending_command_ids.end();
}

}  // namespace

ReplicaSpeeds MeasureReplicaSpeeds(const ParallelLayout& layout, uint64_t attempt,
                                   const std::vector<AgentObservation>& agents,
                                   const MicroBatchMitigationOptions& options) {
  ReplicaSpeeds out;
  std::map<int, RankIterationObservation> iters;
  std::map<uint64_t, std::set<int>> members;  // comm id -> global ranks profiled on it
  std::map<std::pair<uint64_t, int>, const CommProfileObservation*> profile;
  for (const AgentObservation& a : agents) {
    if (!Active(a, attempt)) continue;
    for (const auto& [rank, it] : a.rank_iterations) iters[rank] = it;
    for (const CommProfileObservation& p : a.comm_profiles) {
      if (p.comm_id == 0) continue;
      members[p.comm_id].insert(p.global_rank);
      profile[{p.comm_id, p.global_rank}] = &p;
    }
  }
  const int world = layout.world_size();
  for (int r = 0; r < world; ++r) {
    auto it = iters.find(r);
    if (it == iters.end()) {
      out.why = absl::StrFormat("rank %d has not reported an iteration of attempt %d yet", r, attempt);
      return out;
    }
    if (it->second.micro_batches == 0) {
      out.why = "the trainer does not read micro-batch plans (no mb= in its progress lines)";
      return out;
    }
  }
  out.follows_plans = true;
  out.min_step = iters.begin()->second.step;
  for (const auto& [r, it] : iters) {
    if (r < 0 || r >= world) continue;
    out.min_step = std::min(out.min_step, it.step);
    out.max_step = std::max(out.max_step, it.step);
    out.iteration_seconds = std::max(out.iteration_seconds, it.mean_iteration_seconds);
  }
  // comm id of each DP group (the communicator whose profiled members are exactly it).
  std::map<int, uint64_t> dp_comm;
  for (const CommGroup& g : layout.Groups(GroupKind::kData)) {
    const std::set<int> want(g.ranks.begin(), g.ranks.end());
    for (const auto& [id, m] : members) {
      if (m == want) dp_comm[g.index] = id;
    }
  }
  const int n = layout.data();
  const size_t k = static_cast<size_t>(std::max(options.wait_collectives, 1));
  std::vector<std::string> details;
  for (int d = 0; d < n; ++d) {
    int64_t mb = -1;
    double iter = 0, max_wait = 0;
    for (int r = 0; r < world; ++r) {
      if (layout.Coordinates(r).dp != d) continue;
      const RankIterationObservation& it = iters[r];
      if (mb >= 0 && mb != it.micro_batches) {
        out.why = absl::StrFormat("the ranks of replica %d report different micro-batch counts (%d and %d): a plan is "
                                  "taking effect",
                                  d, mb, it.micro_batches);
        return out;
      }
      mb = it.micro_batches;
      if (!(it.mean_iteration_seconds > 0)) {
        out.why = absl::StrFormat("rank %d has no iteration time yet", r);
        return out;
      }
      iter = std::max(iter, it.mean_iteration_seconds);
      auto comm = dp_comm.find(layout.GroupIndexOf(GroupKind::kData, r));
      auto p = comm == dp_comm.end() ? profile.end() : profile.find({comm->second, r});
      if (p == profile.end()) {
        out.why = absl::StrFormat("no profile of rank %d's data-parallel communicator (profiling is on while a "
                                  "fail-slow is open or a plan is in force)",
                                  r);
        return out;
      }
      std::vector<const CollectiveObservation*> c;
      for (const CollectiveObservation& x : p->second->collectives) {
        if (x.op != "send" && x.op != "recv" && x.exit >= x.enter) c.push_back(&x);
      }
      std::sort(c.begin(), c.end(), [](const auto* a, const auto* b) { return a->sequence < b->sequence; });
      if (c.size() < k + 1) {
        out.why = absl::StrFormat("rank %d's data-parallel profile has %d collectives (%d needed)", r, c.size(), k + 1);
        return out;
      }
      const size_t first = c.size() - k - 1;
      const double span = static_cast<double>(c.back()->exit - c[first]->exit);
      double in_collectives = 0;
      for (size_t i = first + 1; i < c.size(); ++i) in_collectives += static_cast<double>(c[i]->exit - c[i]->enter);
      if (!(span > 0)) {
        out.why = absl::StrFormat("rank %d's data-parallel collectives span no time", r);
        return out;
      }
      max_wait = std::max(max_wait, std::clamp(in_collectives / span, 0.0, 1.0));
    }
    const double busy = iter * (1 - max_wait);
    out.micro_batches.push_back(mb);
    out.seconds_per_micro_batch.push_back(std::max(busy / static_cast<double>(mb), kMinSecondsPerMicroBatch));
    out.global_micro_batches += mb;
    details.push_back(absl::StrFormat("replica %d: %.2f ms per micro-batch (%d micro-batches, busy %.1f ms of a %.1f "
                                      "ms step, %.0f%% waiting in its data-parallel collectives)",
                                      d, out.seconds_per_micro_batch.back() * 1e3, mb, busy * 1e3, iter * 1e3,
                                      max_wait * 100));
  }
  out.detail = absl::StrJoin(details, "; ");
  out.ok = true;
  return out;
}

uint64_t PlanFromStep(const ReplicaSpeeds& speeds, const MicroBatchMitigationOptions& options) {
  uint64_t lead = 2;
  if (speeds.iteration_seconds > 0 && options.delivery_seconds > 0) {
    const double steps = std::ceil(options.delivery_seconds / speeds.iteration_seconds);
    lead = std::max<uint64_t>(lead, 1 + static_cast<uint64_t>(std::min(steps, 1e6)));
  }
  return speeds.max_step + lead;
}

StrategyAvailability RedistributionAvailability(const FailSlowSpec& spec, const ParallelLayout& layout,
                                                const ReplicaSpeeds& speeds, double measured_switch_seconds,
                                                const MicroBatchMitigationOptions& options) {
  StrategyAvailability out;
  if (layout.data() < 2) {
    out.unavailable_reason = "data parallelism is 1 (no replicas to move micro-batches between)";
    return out;
  }
  if (!speeds.follows_plans) {
    out.unavailable_reason = speeds.why;
    return out;
  }
  const uint64_t lead = PlanFromStep(speeds, options) - speeds.max_step;
  auto cost = [&] {
    out.available = true;
    if (measured_switch_seconds > 0) {
      out.cost_seconds = measured_switch_seconds;
      out.cost_source = absl::StrFormat("measured: the job's last micro-batch plan took %.2f s from its decision to "
                                        "every rank running it",
                                        measured_switch_seconds);
    } else {
      out.cost_seconds = static_cast<double>(lead) * speeds.iteration_seconds;
      out.cost_source = absl::StrFormat(
          "the steps until a plan takes effect, at the current iteration time: %d x %.1f ms", lead,
          speeds.iteration_seconds * 1e3);
    }
  };
  if (!speeds.ok) {
    // The trainer follows plans but the speeds are not measured yet (the profiles arrive
    // a heartbeat after profiling is switched on, and pause with the validation): S2 is
    // offered, and waits for them once chosen (its rent then runs on towards S4).
    cost();
    return out;
  }
  MicroBatchReplanInputs in;
  in.current_micro_batches = speeds.micro_batches;
  in.seconds_per_micro_batch = speeds.seconds_per_micro_batch;
  in.min_relative_improvement = Threshold(spec);
  absl::StatusOr<MicroBatchReplan> r = EvaluateMicroBatchReplan(in);
  if (!r.ok()) {
    out.unavailable_reason = absl::StrCat("the measured speeds cannot be planned: ", r.status().message());
    return out;
  }
  if (!r->apply) {
    out.unavailable_reason = absl::StrFormat(
        "the measured replica speeds leave little to redistribute: the exact plan %s shortens the step's %.1f ms "
        "by %.1f%% (verifyThreshold %.0f%%); %s",
        Counts(r->split.micro_batches), r->current_makespan_seconds * 1e3, r->relative_improvement * 100,
        in.min_relative_improvement * 100, speeds.detail);
    return out;
  }
  cost();
  return out;
}

namespace {

MicroBatchPlanDecision DecidePlan(const MicroBatchPlanInput& in, int64_t now, const MicroBatchMitigationOptions& options) {
  MicroBatchPlanDecision d;
  MicroBatchPlanRecord& rec = d.record;
  rec = in.record;
  const ReplicaSpeeds& sp = in.speeds;
  const double threshold = Threshold(in.spec);
  std::vector<const AgentObservation*> pods;
  for (const AgentObservation& a : in.agents) {
    if (Active(a, in.attempt)) pods.push_back(&a);
  }
  auto event = [&](JobEventType type, const std::string& reason, const std::string& text) {
    d.events.push_back(JobEvent{type, reason, absl::StrFormat("fail-slow #%d: %s", in.finding_id, text)});
  };
  auto report = [&](const std::string& text) {
    if (text == rec.reported) return;
    rec.reported = text;
    event(JobEventType::kNormal, "MicroBatchPlanWaiting", text);
  };
  auto clear = [&](const std::string& reason) {
    rec.cleared_at = now;
    rec.cleared_reason = reason;
    rec.reported.clear();
    event(JobEventType::kNormal, "MicroBatchPlanCleared",
          absl::StrFormat("S2 plan %d withdrawn (back to the even split): %s", rec.plan_id, reason));
  };

  if (PlanInForce(rec) && rec.attempt != in.attempt) {
    clear(absl::StrFormat("the job restarted (attempt %d -> %d; each training start removes the plan file)",
                          rec.attempt, in.attempt));
  }
  if (PlanInForce(rec)) {
    for (const AgentObservation* a : pods) {
      auto f = a->failed_commands.find(PlanCommandId(in.job_name, rec.plan_id, a->pod));
      if (f == a->failed_commands.end()) continue;
      rec.failed = absl::StrCat(a->pod, ": ", f->second);
      clear(absl::StrCat("the agent of pod ", rec.failed));
      break;
    }
  }
  if (PlanInForce(rec) && rec.in_force_at == 0 && sp.ok && sp.min_step >= rec.from_step &&
      sp.micro_batches == rec.counts) {
    rec.in_force_at = now;
    event(JobEventType::kNormal, "MicroBatchPlanInForce",
          absl::StrFormat("S2 plan %d in force %.2f s after its decision: every rank runs its share %s; iteration "
                          "%.1f ms; %s",
                          rec.plan_id, static_cast<double>(now - rec.decided_at) / 1e9, Counts(rec.counts),
                          sp.iteration_seconds * 1e3, sp.detail));
  }
  const bool window_done = PlanInForce(rec) && rec.in_force_at != 0 && sp.ok && sp.micro_batches == rec.counts &&
                           sp.min_step >= rec.from_step + static_cast<uint64_t>(std::max(options.verify_window_steps, 0));

  auto send_plan = [&] {
    if (!PlanInForce(rec)) return;
    for (const AgentObservation* a : pods) {
      CommandToSend c;
      c.pod = a->pod;
      c.id = PlanCommandId(in.job_name, rec.plan_id, a->pod);
      if (Known(*a, c.id)) continue;
      c.kind = CommandKind::kSetMicroBatchPlan;
      c.microbatch_plan.plan_id = rec.plan_id;
      c.microbatch_plan.from_step = rec.from_step;
      for (int64_t n : rec.counts) c.microbatch_plan.counts.push_back(static_cast<uint32_t>(n));
      c.microbatch_plan.gradient_scale = rec.gradient_scale;
      c.microbatch_plan.global_micro_batches = static_cast<uint32_t>(rec.global_micro_batches);
      d.commands.push_back(std::move(c));
    }
  };

  if (PlanInForce(rec) && !in.wanted) {
    if (!sp.ok) {
      clear(absl::StrCat("the fail-slow ended and the plan can no longer be checked: ", sp.why));
    } else if (window_done) {
      MicroBatchReplanInputs ri;
      ri.current_micro_batches = rec.counts;
      ri.seconds_per_micro_batch = sp.seconds_per_micro_batch;
      ri.min_relative_improvement = threshold;
      absl::StatusOr<MicroBatchReplan> r = EvaluateMicroBatchReplan(ri);
      if (!r.ok()) {
        clear(absl::StrCat("the fail-slow ended and the measured speeds cannot be planned: ", r.status().message()));
      } else {
        const double even = r->split.even_split_makespan_seconds, plan = r->current_makespan_seconds;
        const double gain = even > 0 ? (even - plan) / even : 0;
        const std::string figures = absl::StrFormat(
            "the even split's step would take %.1f ms, the plan's %.1f ms (%.1f%%, verifyThreshold %.0f%%); %s",
            even * 1e3, plan * 1e3, gain * 100, threshold * 100, sp.detail);
        if (gain <= threshold) {
          clear(absl::StrCat("the fail-slow ended and the measured speeds no longer favour the plan: ", figures));
        } else {
          report(absl::StrFormat("keeping S2 plan %d after the fail-slow ended: the measured speeds still favour it: %s",
                                 rec.plan_id, figures));
        }
      }
    }
    send_plan();
    return d;
  }
  if (!in.wanted || !rec.failed.empty()) return d;

  if (!sp.ok) {
    report(absl::StrCat("S2 waits for measurements: ", sp.why));
    send_plan();
    return d;
  }
  if (!PlanInForce(rec) || window_done) {
    MicroBatchReplanInputs ri;
    ri.current_micro_batches = PlanInForce(rec) ? rec.counts : sp.micro_batches;
    ri.seconds_per_micro_batch = sp.seconds_per_micro_batch;
    ri.min_relative_improvement = threshold;
    absl::StatusOr<MicroBatchReplan> r = EvaluateMicroBatchReplan(ri);
    if (!r.ok()) {
      report(absl::StrCat("S2 cannot plan the measured speeds: ", r.status().message()));
    } else if (!r->apply) {
      if (!PlanInForce(rec)) {
        report(absl::StrFormat("S2 waits: the exact plan %s would shorten the step by only %.1f%% (verifyThreshold "
                               "%.0f%%); %s",
                               Counts(r->split.micro_batches), r->relative_improvement * 100, threshold * 100,
                               sp.detail));
      }
    } else if (PlanInForce(rec) &&
               r->split.micro_batches == EvenSplit(sp.global_micro_batches, r->split.micro_batches.size())) {
      clear(absl::StrFormat("the measured speeds make the even split optimal again (step %.1f ms -> %.1f ms); %s",
                            r->current_makespan_seconds * 1e3, r->split.makespan_seconds * 1e3, sp.detail));
    } else {
      const std::vector<int64_t> before = ri.current_micro_batches;
      rec.plan_id = std::max(in.next_plan_id, rec.plan_id + 1);
      rec.attempt = in.attempt;
      rec.from_step = PlanFromStep(sp, options);
      rec.counts = r->split.micro_batches;
      rec.gradient_scale = r->split.gradient_scale;
      rec.global_micro_batches = sp.global_micro_batches;
      rec.seconds_per_micro_batch = sp.seconds_per_micro_batch;
      rec.predicted_step_seconds = r->split.makespan_seconds;
      rec.previous_step_seconds = r->current_makespan_seconds;
      rec.decided_at = now;
      rec.in_force_at = 0;
      rec.cleared_at = 0;
      rec.cleared_reason.clear();
      rec.reported.clear();
      ++rec.plans;
      d.planned = true;
      event(JobEventType::kWarning, "MicroBatchPlan",
            absl::StrFormat("S2 plan %d from step %d: micro-batches per data-parallel replica %s (was %s, M=%d), "
                            "gradient scale n/M = %.6g; measured time per micro-batch %s; predicted step compute "
                            "%.1f ms -> %.1f ms (-%.0f%%); %s",
                            rec.plan_id, rec.from_step, Counts(rec.counts), Counts(before), rec.global_micro_batches,
                            rec.gradient_scale, MsList(rec.seconds_per_micro_batch), rec.previous_step_seconds * 1e3,
                            rec.predicted_step_seconds * 1e3, r->relative_improvement * 100, sp.detail));
    }
  }
  send_plan();
  return d;
}

}  // namespace

MicroBatchPlanDecision DecideMicroBatchPlan(const MicroBatchPlanInput& in, int64_t now,
                                            const MicroBatchMitigationOptions& options) {
  MicroBatchPlanDecision d = DecidePlan(in, now, options);
  // A withdrawn plan: the empty plan to every active pod that has not had it (level-based,
  // so pods of a new attempt get it once their agents run it).
  const MicroBatchPlanRecord& rec = d.record;
  if (rec.plan_id == 0 || rec.cleared_at == 0) return d;
  for (const AgentObservation& a : in.agents) {
    if (!Active(a, in.attempt)) continue;
    CommandToSend c;
    c.pod = a.pod;
    c.id = ClearCommandId(in.job_name, rec.plan_id, a.pod);
    c.kind = CommandKind::kSetMicroBatchPlan;  // the empty plan
    if (!Known(a, c.id)) d.commands.push_back(std::move(c));
  }
  return d;
}

}  // namespace peregrine
