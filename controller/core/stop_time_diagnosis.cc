#include "controller/core/stop_time_diagnosis.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/neighbour_pairs.h"
#include "diagnosis/dual_phase_replay.h"
#include "diagnosis/parallel_layout.h"

// How the stop-time diagnosis runs. Training is stopped on every slot, then the stages run
// one after the other, each as RunDiagnostic commands with deterministic ids
// "<prefix>/<stage>[-r<round>]/<pod>" (a restarted controller re-sends the same ids and the
// agents answer with their stored results, so no stage runs twice):
//   stop        kStop on every connected agent; done when each answered or after the
//               restart grace + margin;
//   alignment   (NaN / spike only, first) every machine runs the same reference step; the
//               digest held by a strict majority of machines is healthy, the others (and a
//               machine whose run produced NaN) fail; no majority -> no verdict;
//   eud         every machine: GPU self-test (dcgmi diag or the stand-in);
//   all_to_all  every machine: intra-machine all-to-all, contents and bandwidth;
//   all_gather  neighbour pairs (neighbour_pairs.h), 2 or 3 rounds; a machine whose every
//               pair failed is the culprit;
//   replay      (only when the engine asks for it, see StartReplayStage) dual-phase replay
//               (diagnosis/dual_phase_replay.h): round 0 the horizontal groups, round 1 the
//               vertical ones; every group is one replay job (rendezvous at its first
//               machine); the digest shared by the most groups of the same shape (at least
//               two, strictly more than any other digest) is healthy, the others fail; the
//               failing horizontal and vertical groups intersect in the faulty machine.
// Bandwidth (all_to_all, all_gather): a machine whose answer passed on contents fails too
// when even its fastest repetition (peak_busbw_gbps) is below kSlowBandwidthFraction x the
// median of the faster half of the round's fastest repetitions AND below
// kSlowBandwidthFraction x the median of the faster half of the round's typical
// (median-repetition, busbw_gbps) figures (SlowBandwidthOutliers). The faster half, not the
// whole round: a slow NIC slows both members of each all-gather pair it is in, which in a
// round of four machines is half of the answers, and a whole-round median then sits between
// the slow and the healthy level (on a loaded host, low enough to pass the slow pair). A
// degraded NVLink or NIC is slow in every repetition, while a machine starved of CPU on a
// shared host stays near its peers' typical run. Peers, not a fixed GB/s figure, set the bar.
// Judging a machine's answer: not_present -> passed (recorded); a command error (e.g. an
// agent without that diagnostic: UNIMPLEMENTED) -> no evidence, passed (recorded as
// unavailable); no answer by the stage deadline (the kind's timeout + kAnswerMarginNs) ->
// failed if its agent is connected, heartbeated within the heartbeat timeout and still
// holds the command as pending (a live agent whose diagnostic cannot finish points at the
// machine itself; the agent runs diagnostics off its heartbeat loop, kills them at their
// timeout and answers); no verdict for it ("inconclusive: agent link lost") if the agent
// is disconnected, silent for longer than the heartbeat timeout (a half-open stream), or
// no longer holds the command (its stream dropped and came back: the command and its
// answer were lost with it). A lost link is not the machine's fault: the lost-pod and
// unready-node paths decide about a machine that is really gone. A stage in which more than half of at least two machines fail gives no
// verdict (a job-wide cause such as a bad build or a diagnosis bug is not a machine fault).
// The first stage with failing machines ends the diagnosis with them as the verdict; when
// every stage passes the engine decides what comes next (reattempt, rollback or replay).

namespace peregrine {
namespace {

constexpr uint32_t kEudTimeoutMs = 120'000;
constexpr uint32_t kAllToAllTimeoutMs = 60'000;
constexpr uint32_t kAllGatherTimeoutMs = 60'000;
constexpr uint32_t kAlignmentTimeoutMs = 120'000;
constexpr uint32_t kReplayTimeoutMs = 300'000;
constexpr const char* kReplaySteps = "4";
constexpr const char* kSeed = "1234";
constexpr const char* kBytes = "1048576";

std::vector<StopTimeStage> MachineStages(bool numeric) {
  using S = StopTimeStage;
  if (numeric) return {S::kStop, S::kAlignment, S::kEud, S::kAllToAll, S::kAllGather};
  return {S::kStop, S::kEud, S::kAllToAll, S::kAllGather};
}

// One command of a round.
struct Task {
  int slot = 0;
  int unit = 0;  // pair edge / replay group; the slot for per-machine stages
  CommandKind kind = CommandKind::kRunDiagnostic;
  DiagnosticRequest request;
};

enum class Answer { kPending, kPassed, kFailed, kUnavailable, kExcluded };

struct Judged {
  Answer answer = Answer::kPending;
  std::string line;  // "<machine>: ..." for the record
  const DiagnosticOutcome* outcome = nullptr;
};

std::string Figures(const DiagnosticOutcome& d) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : d.figures) parts.push_back(absl::StrFormat("%s=%.3g", k, v));
  return parts.empty() ? "" : absl::StrCat(" [", absl::StrJoin(parts, " "), "]");
}

Judged JudgeTask(const DiagnosisContext& ctx, const DiagnosisMachine& m, const std::string& id, bool deadline_passed) {
  Judged j;
  const std::string who = m.machine_id.empty() ? m.pod : m.machine_id;
  const AgentObservation* a = m.agent;
  if (a != nullptr) {
    if (auto it = a->command_results.find(id); it != a->command_results.end()) {
      const CommandResultObservation& r = it->second;
      if (!r.ok) {
        j.answer = Answer::kUnavailable;
        j.line = absl::StrCat(who, ": unavailable (", r.message, ")");
        return j;
      }
      if (!r.diagnostic) {  // stop, or a diagnostic answer without payload
        j.answer = Answer::kPassed;
        j.line = absl::StrCat(who, ": done");
        return j;
      }
      const DiagnosticOutcome& d = *r.diagnostic;
      j.outcome = &d;
      if (d.not_present) {
        j.answer = Answer::kPassed;
        j.line = absl::StrCat(who, ": not present", d.detail.empty() ? "" : absl::StrCat(" (", d.detail, ")"));
      } else if (d.passed) {
        j.answer = Answer::kPassed;
        j.line = absl::StrCat(who, ": passed", d.digest.empty() ? "" : absl::StrCat(" digest ", d.digest), Figures(d));
      } else {
        j.answer = Answer::kFailed;
        j.line = absl::StrCat(who, ": FAILED: ", d.detail, Figures(d));
      }
      return j;
    }
  }
  const bool connected = a != nullptr && a->connected;
  if (!deadline_passed && connected) return j;  // pending
  if (!connected) {
    j.answer = Answer::kExcluded;
    j.line = absl::StrCat(who, ": agent disconnected, no verdict");
    return j;
  }
  // Connected, no answer by the deadline: a machine verdict only when the link is known to
  // have worked the whole time, i.e. the agent kept heartbeating and still holds the command.
  if (ctx.now - a->last_seen > ctx.heartbeat_timeout_ns) {
    j.answer = Answer::kExcluded;
    j.line = absl::StrFormat("%s: inconclusive: agent link lost (silent for %d s), no verdict", who,
                             (ctx.now - a->last_seen) / 1'000'000'000);
    return j;
  }
  if (std::find(a->pending_command_ids.begin(), a->pending_command_ids.end(), id) == a->pending_command_ids.end()) {
    j.answer = Answer::kExcluded;
    j.line = absl::StrCat(who, ": inconclusive: agent link lost (the command and its answer were lost with a dropped "
                               "stream), no verdict");
    return j;
  }
  j.answer = Answer::kFailed;
  j.line = absl::StrCat(who, ": no answer before the deadline");
  return j;
}

uint32_t TimeoutOf(StopTimeStage stage) {
  switch (stage) {
    case StopTimeStage::kEud: return kEudTimeoutMs;
    case StopTimeStage::kAllToAll: return kAllToAllTimeoutMs;
    case StopTimeStage::kAllGather: return kAllGatherTimeoutMs;
    case StopTimeStage::kAlignment: return kAlignmentTimeoutMs;
    case StopTimeStage::kReplay: return kReplayTimeoutMs;
    case StopTimeStage::kStop: return 0;
  }
  return 0;
}

absl::StatusOr<DualPhaseReplayPlan> ReplayPlan(const DiagnosisContext& ctx) {
  auto layout = ParallelLayout::Create(ctx.parallelism.tensor, ctx.parallelism.pipeline, ctx.parallelism.data,
                                       ctx.gpus_per_machine);
  if (!layout.ok()) return layout.status();
  return PlanDualPhaseReplay(*layout);
}

// The commands of one round; `rounds` is how many the stage has (0: nothing to run).
std::vector<Task> RoundTasks(const DiagnosisContext& ctx, const StopTimeDiagnosis& st, int* rounds,
                             std::string* skip_note) {
  std::vector<Task> tasks;
  const int n = static_cast<int>(ctx.machines.size());
  const StopTimeStage stage = st.stage;
  *rounds = 1;
  if (stage == StopTimeStage::kStop) {
    for (const DiagnosisMachine& m : ctx.machines) tasks.push_back(Task{m.slot, m.slot, CommandKind::kStop, {}});
    return tasks;
  }
  if (stage == StopTimeStage::kEud || stage == StopTimeStage::kAllToAll || stage == StopTimeStage::kAlignment) {
    for (const DiagnosisMachine& m : ctx.machines) {
      Task t{m.slot, m.slot, CommandKind::kRunDiagnostic, {}};
      t.request.kind = stage == StopTimeStage::kEud        ? DiagnosticKind::kEud
                       : stage == StopTimeStage::kAllToAll ? DiagnosticKind::kAllToAll
                                                           : DiagnosticKind::kAlignment;
      t.request.timeout_ms = TimeoutOf(stage);
      if (stage == StopTimeStage::kEud) t.request.params = {{"level", "1"}};
      if (stage == StopTimeStage::kAllToAll) t.request.params = {{"bytes", kBytes}};
      if (stage == StopTimeStage::kAlignment) t.request.params = {{"seed", kSeed}, {"steps", "2"}};
      tasks.push_back(std::move(t));
    }
    return tasks;
  }
  if (stage == StopTimeStage::kAllGather) {
    const auto plan = PlanNeighbourPairs(n);
    *rounds = static_cast<int>(plan.size());
    if (plan.empty()) {
      *skip_note = "one machine: no neighbour to pair with";
      return tasks;
    }
    for (const NeighbourPair& p : plan[static_cast<size_t>(std::min<int>(st.round, *rounds - 1))]) {
      int index = 0;
      for (int slot : {p.first, p.second}) {
        Task t{slot, p.index, CommandKind::kRunDiagnostic, {}};
        t.request.kind = DiagnosticKind::kAllGather;
        t.request.timeout_ms = kAllGatherTimeoutMs;
        t.request.params = {{"master_addr", ctx.machines[static_cast<size_t>(p.first)].address},
                            {"master_port", absl::StrCat(st.port_base + 1 + static_cast<uint32_t>(p.index))},
                            {"machines", "2"},
                            {"machine_index", absl::StrCat(index++)},
                            {"bytes", kBytes},
                            {"group", absl::StrFormat("pair %d-%d", p.first, p.second)}};
        tasks.push_back(std::move(t));
      }
    }
    return tasks;
  }
  if (stage == StopTimeStage::kReplay) {
    auto plan = ReplayPlan(ctx);
    *rounds = 2;
    if (!plan.ok()) {
      *rounds = 0;
      *skip_note = absl::StrCat("dual-phase replay impossible: ", plan.status().message());
      return tasks;
    }
    const auto& groups = st.round == 0 ? plan->horizontal : plan->vertical;
    const uint32_t offset = 1 + static_cast<uint32_t>(n) + (st.round == 0 ? 0 : static_cast<uint32_t>(plan->horizontal.size()));
    for (const ReplayGroup& g : groups) {
      for (size_t j = 0; j < g.machines.size(); ++j) {
        Task t{g.machines[j], g.index, CommandKind::kRunDiagnostic, {}};
        t.request.kind = DiagnosticKind::kReplay;
        t.request.timeout_ms = kReplayTimeoutMs;
        t.request.params = {{"master_addr", ctx.machines[static_cast<size_t>(g.machines[0])].address},
                            {"master_port", absl::StrCat(st.port_base + offset + static_cast<uint32_t>(g.index))},
                            {"machines", absl::StrCat(g.machines.size())},
                            {"machine_index", absl::StrCat(j)},
                            {"tp", absl::StrCat(ctx.parallelism.tensor)},
                            {"pp", absl::StrCat(ctx.parallelism.pipeline)},
                            {"dp", absl::StrCat(g.replay_dp)},
                            {"layers", absl::StrCat(plan->layers)},
                            {"steps", kReplaySteps},
                            {"seed", kSeed},
                            {"group", absl::StrFormat("%s %d", st.round == 0 ? "horizontal" : "vertical", g.index)}};
        tasks.push_back(std::move(t));
      }
    }
    return tasks;
  }
  *rounds = 0;
  *skip_note = absl::StrCat("unknown stage ", ToString(stage));
  return tasks;
}

DiagnosisStageRecord& CurrentRecord(const StopTimeDiagnosis& st, std::vector<DiagnosisStageRecord>* records) {
  if (records->empty() || records->back().stage != st.stage || records->back().finished_at != 0) {
    DiagnosisStageRecord r;
    r.stage = st.stage;
    r.started_at = st.stage_started_at;
    records->push_back(std::move(r));
  }
  return records->back();
}

// Failing machines of a per-machine stage, with the majority guard.
std::set<int> MajorityGuard(const std::set<int>& failed, int participating, std::string* note) {
  if (participating >= 2 && static_cast<int>(failed.size()) * 2 > participating) {
    *note = absl::StrFormat("%d of %d machines failed: not attributable to a machine, no verdict", failed.size(),
                            participating);
    return {};
  }
  return failed;
}

// The healthy digest among `digests` (unit -> digest): held by the most units, at least two
// and strictly more than any other; "" when there is none.
std::string HealthyDigest(const std::vector<std::string>& digests) {
  std::map<std::string, int> count;
  for (const std::string& d : digests) {
    if (!d.empty()) ++count[d];
  }
  std::string best;
  int best_n = 0;
  bool tie = false;
  for (const auto& [d, c] : count) {
    if (c > best_n) {
      best = d;
      best_n = c;
      tie = false;
    } else if (c == best_n) {
      tie = true;
    }
  }
  return best_n >= 2 && !tie ? best : "";
}

// The median of the values (the mean of the two middle ones for an even count); 0 if none.
double MedianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The median of the faster half of `values` (sorted positions n/2 .. n-1): the healthy
// peers' level while fewer than half of the values are slow.
double UpperHalfMedian(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  values.erase(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2));
  return MedianOf(std::move(values));
}

// The figures a round's bandwidths are judged against.
struct BandwidthReference {
  double median_peak = 0;   // of every sample: at or below 0, nothing is judged
  double upper_peak = 0;    // UpperHalfMedian of the peaks
  double upper_typical = 0; // UpperHalfMedian of the typical figures
};

BandwidthReference ReferenceOf(const std::vector<BandwidthSample>& samples) {
  std::vector<double> peaks, typicals;
  for (const BandwidthSample& s : samples) {
    peaks.push_back(s.peak_gbps);
    typicals.push_back(s.typical_gbps);
  }
  BandwidthReference r;
  r.median_peak = MedianOf(peaks);
  r.upper_peak = UpperHalfMedian(std::move(peaks));
  r.upper_typical = UpperHalfMedian(std::move(typicals));
  return r;
}

// Fails the answers of a bandwidth stage round that passed on contents but whose busbw is
// far below the round's (SlowBandwidthOutliers).
void ApplyBandwidthRule(const DiagnosisContext& ctx, const std::vector<Task>& tasks, std::vector<Judged>* judged) {
  std::vector<BandwidthSample> samples;
  for (size_t i = 0; i < judged->size(); ++i) {
    const Judged& j = (*judged)[i];
    if (j.answer != Answer::kPassed || j.outcome == nullptr || j.outcome->not_present) continue;
    const auto typical = j.outcome->figures.find("busbw_gbps");
    const auto peak = j.outcome->figures.find("peak_busbw_gbps");
    if (typical == j.outcome->figures.end() && peak == j.outcome->figures.end()) continue;
    BandwidthSample s;
    s.key = static_cast<int>(i);
    s.typical_gbps = typical != j.outcome->figures.end() ? typical->second : peak->second;
    s.peak_gbps = peak != j.outcome->figures.end() ? peak->second : typical->second;
    samples.push_back(s);
  }
  const std::vector<int> slow = SlowBandwidthOutliers(samples);
  if (slow.empty()) return;
  const BandwidthReference ref = ReferenceOf(samples);
  std::map<int, double> peak_of;
  for (const BandwidthSample& s : samples) peak_of[s.key] = s.peak_gbps;
  for (int i : slow) {
    Judged& j = (*judged)[static_cast<size_t>(i)];
    const DiagnosisMachine& m = ctx.machines[static_cast<size_t>(tasks[static_cast<size_t>(i)].slot)];
    j.answer = Answer::kFailed;
    j.line = absl::StrFormat(
        "%s: FAILED: busbw %.3g GB/s at best, below %.2gx the round's faster half %.3g GB/s (typical %.3g GB/s)%s",
        m.machine_id.empty() ? m.pod : m.machine_id, peak_of.at(i), kSlowBandwidthFraction, ref.upper_peak,
        ref.upper_typical, Figures(*j.outcome));
  }
}

}  // namespace

std::vector<int> SlowBandwidthOutliers(const std::vector<BandwidthSample>& samples, double fraction) {
  std::vector<int> out;
  if (samples.size() < 2) return out;
  const BandwidthReference ref = ReferenceOf(samples);
  if (!(ref.median_peak > 0)) return out;
  for (const BandwidthSample& s : samples) {
    if (s.peak_gbps < fraction * ref.upper_peak && s.peak_gbps < fraction * ref.upper_typical) out.push_back(s.key);
  }
  return out;
}

std::string DiagnosisCommandId(const std::string& prefix, StopTimeStage stage, int round, const std::string& pod) {
  return absl::StrCat(prefix, "/", ToString(stage), round > 0 ? absl::StrCat("-r", round) : "", "/", pod);
}

StopTimeDiagnosis BeginStopTimeDiagnosis(uint64_t incident_id, bool numeric, uint32_t port_base, int64_t now) {
  StopTimeDiagnosis st;
  st.incident_id = incident_id;
  st.numeric = numeric;
  st.stage = StopTimeStage::kStop;
  st.round = 0;
  st.stage_started_at = now;
  st.port_base = port_base != 0 ? port_base : 29500;
  return st;
}

void StartReplayStage(StopTimeDiagnosis* state, int64_t now) {
  state->stage = StopTimeStage::kReplay;
  state->round = 0;
  state->stage_started_at = now;
  state->outcomes.clear();
}

DiagnosisAdvance AdvanceStopTimeDiagnosis(const DiagnosisContext& ctx, StopTimeDiagnosis* st,
                                          std::vector<DiagnosisStageRecord>* records) {
  DiagnosisAdvance out;
  const int n = static_cast<int>(ctx.machines.size());
  for (int guard = 0; guard < 64; ++guard) {
    int rounds = 1;
    std::string skip_note;
    const std::vector<Task> tasks = RoundTasks(ctx, *st, &rounds, &skip_note);
    DiagnosisStageRecord& record = CurrentRecord(*st, records);
    std::set<int> failed_slots;
    bool stage_done = false;
    if (rounds == 0 || tasks.empty()) {
      record.note = skip_note;
      stage_done = true;
    } else {
      const int64_t deadline =
          st->stage_started_at +
          (st->stage == StopTimeStage::kStop ? static_cast<int64_t>(ctx.stop_grace_ms) * 1'000'000
                                              : int64_t{TimeoutOf(st->stage)} * 1'000'000) +
          kAnswerMarginNs;
      const bool deadline_passed = ctx.now >= deadline;
      std::vector<Judged> judged;
      bool pending = false;
      for (const Task& t : tasks) {
        const DiagnosisMachine& m = ctx.machines[static_cast<size_t>(t.slot)];
        const std::string id = DiagnosisCommandId(ctx.id_prefix, st->stage, st->round, m.pod);
        Judged j = JudgeTask(ctx, m, id, deadline_passed);
        if (j.answer == Answer::kPending) {
          pending = true;
          const bool sent = m.agent != nullptr && std::find(m.agent->pending_command_ids.begin(),
                                                            m.agent->pending_command_ids.end(),
                                                            id) != m.agent->pending_command_ids.end();
          if (!sent) {
            CommandToSend c;
            c.pod = m.pod;
            c.id = id;
            c.kind = t.kind;
            c.grace_ms = ctx.stop_grace_ms;
            c.diagnostic = t.request;
            out.commands.push_back(std::move(c));
          }
        }
        judged.push_back(std::move(j));
      }
      if (pending) {
        out.requeue_after_ns = std::max<int64_t>(deadline - ctx.now, 1'000'000);
        return out;
      }
      // The round is complete: judge it.
      if (st->stage == StopTimeStage::kAllToAll || st->stage == StopTimeStage::kAllGather) {
        ApplyBandwidthRule(ctx, tasks, &judged);
      }
      const std::string round_tag = rounds > 1 ? absl::StrFormat("round %d: ", st->round) : "";
      for (const Judged& j : judged) record.results.push_back(absl::StrCat(round_tag, j.line));
      if (st->stage == StopTimeStage::kStop) {
        stage_done = true;
      } else if (st->stage == StopTimeStage::kEud || st->stage == StopTimeStage::kAllToAll ||
                 st->stage == StopTimeStage::kAlignment) {
        int participating = 0;
        std::set<int> failed;
        std::vector<std::string> digests;
        for (size_t i = 0; i < tasks.size(); ++i) {
          if (judged[i].answer == Answer::kExcluded) continue;
          ++participating;
          if (judged[i].answer == Answer::kFailed) failed.insert(tasks[i].slot);
          if (st->stage == StopTimeStage::kAlignment && judged[i].answer == Answer::kPassed && judged[i].outcome &&
              !judged[i].outcome->not_present) {
            digests.push_back(judged[i].outcome->digest);
          }
        }
        if (st->stage == StopTimeStage::kAlignment) {
          // The strict-majority digest is healthy; a machine with another digest fails.
          std::map<std::string, int> count;
          for (const std::string& d : digests) ++count[d];
          std::string majority;
          for (const auto& [d, c] : count) {
            if (!d.empty() && c * 2 > participating) majority = d;
          }
          if (majority.empty() && count.size() > 1) {
            record.note = absl::StrFormat("no digest is held by a majority of %d machines: no verdict", participating);
            failed.clear();
          } else if (!majority.empty()) {
            record.note = absl::StrFormat("majority digest %s (%d of %d machines)", majority, count[majority],
                                          participating);
            for (size_t i = 0; i < tasks.size(); ++i) {
              if (judged[i].answer == Answer::kPassed && judged[i].outcome && !judged[i].outcome->not_present &&
                  judged[i].outcome->digest != majority) {
                failed.insert(tasks[i].slot);
              }
            }
          }
        }
        std::string note;
        failed_slots = MajorityGuard(failed, participating, &note);
        if (!note.empty()) record.note = note;
        stage_done = true;
      } else if (st->stage == StopTimeStage::kAllGather) {
        std::map<int, Answer> edge;
        for (size_t i = 0; i < tasks.size(); ++i) {
          Answer& e = edge.emplace(tasks[i].unit, Answer::kPassed).first->second;
          if (judged[i].answer == Answer::kFailed) e = Answer::kFailed;
          if (judged[i].answer == Answer::kExcluded && e != Answer::kFailed) e = Answer::kExcluded;
        }
        for (const auto& [unit, a] : edge) {
          st->outcomes[absl::StrCat(unit)] = a == Answer::kFailed ? "failed" : (a == Answer::kExcluded ? "excluded" : "passed");
        }
        if (st->round + 1 < rounds) {
          ++st->round;
          st->stage_started_at = ctx.now;
          continue;
        }
        std::set<int> failed_edges;
        for (const auto& [unit, o] : st->outcomes) {
          if (o == "failed") failed_edges.insert(std::stoi(unit));
        }
        const std::set<int> culprits = NeighbourCulprits(n, failed_edges);
        if (!failed_edges.empty() && culprits.empty()) {
          record.note = absl::StrFormat("%d pair(s) failed but no machine failed all its pairs: no verdict",
                                        failed_edges.size());
        }
        std::string note;
        failed_slots = MajorityGuard(culprits, n, &note);
        if (!note.empty()) record.note = note;
        stage_done = true;
      } else if (st->stage == StopTimeStage::kReplay) {
        // Each group: its members' common digest, "failed" or "unavailable".
        std::map<int, std::string> group;
        for (size_t i = 0; i < tasks.size(); ++i) {
          std::string v;
          switch (judged[i].answer) {
            case Answer::kFailed: v = "failed"; break;
            case Answer::kUnavailable:
            case Answer::kExcluded: v = "unavailable"; break;
            default: v = judged[i].outcome && !judged[i].outcome->not_present ? judged[i].outcome->digest : "unavailable";
          }
          if (v.empty()) v = "unavailable";
          auto [it, inserted] = group.emplace(tasks[i].unit, v);
          if (!inserted && it->second != v) {
            if (it->second == "failed" || v == "failed") {
              it->second = "failed";
            } else if (it->second != "unavailable") {
              it->second = v == "unavailable" ? "unavailable" : "failed";  // members disagree
            }
          }
        }
        for (const auto& [g, v] : group) st->outcomes[absl::StrCat(st->round, "/", g)] = v;
        if (st->round == 0) {
          ++st->round;
          st->stage_started_at = ctx.now;
          continue;
        }
        auto plan = ReplayPlan(ctx);
        // Healthy digest per group shape (machines, replay DP).
        std::map<std::pair<size_t, int>, std::vector<std::string>> by_shape;
        auto shape_of = [&](int phase, int g) {
          const ReplayGroup& rg = phase == 0 ? plan->horizontal[static_cast<size_t>(g)] : plan->vertical[static_cast<size_t>(g)];
          return std::make_pair(rg.machines.size(), rg.replay_dp);
        };
        bool unavailable = false;
        for (const auto& [key, v] : st->outcomes) {
          const int phase = key[0] == '0' ? 0 : 1;
          const int g = std::stoi(key.substr(key.find('/') + 1));
          if (v == "unavailable") unavailable = true;
          if (v != "failed" && v != "unavailable") by_shape[shape_of(phase, g)].push_back(v);
        }
        std::vector<int> failed_h, failed_v;
        bool undecided = unavailable;
        for (const auto& [key, v] : st->outcomes) {
          const int phase = key[0] == '0' ? 0 : 1;
          const int g = std::stoi(key.substr(key.find('/') + 1));
          const std::string healthy = HealthyDigest(by_shape[shape_of(phase, g)]);
          if (v == "failed" || (v != "unavailable" && !healthy.empty() && v != healthy)) {
            (phase == 0 ? failed_h : failed_v).push_back(g);
          } else if (v != "unavailable" && healthy.empty()) {
            undecided = true;
          }
        }
        if (unavailable) {
          record.note = "replay unavailable on some machine: no verdict";
        } else if (undecided && (failed_h.empty() || failed_v.empty())) {
          record.note = "no digest is shared by most replay groups of one shape: no verdict";
        } else {
          auto located = LocateFaultyMachine(*plan, failed_h, failed_v);
          if (located.ok()) {
            failed_slots.insert(*located);
            record.note = absl::StrFormat("failing horizontal group(s) %s and vertical group(s) %s intersect in slot %d",
                                          absl::StrJoin(failed_h, ","), absl::StrJoin(failed_v, ","), *located);
          } else {
            record.note = absl::StrCat("no verdict: ", located.status().message());
          }
        }
        stage_done = true;
      }
    }
    if (!stage_done) continue;
    // Record the stage's verdict; the first stage with failing machines ends the diagnosis.
    record.finished_at = ctx.now;
    for (int s : failed_slots) {
      const DiagnosisMachine& m = ctx.machines[static_cast<size_t>(s)];
      record.failed_machines.push_back(m.machine_id.empty() ? m.pod : m.machine_id);
    }
    record.verdict = !failed_slots.empty()                                   ? StageVerdict::kFailed
                     : record.note.find("no verdict") != std::string::npos ? StageVerdict::kNoVerdict
                                                                           : StageVerdict::kPassed;
    if (!failed_slots.empty()) {
      out.finished = true;
      out.failed_slots.assign(failed_slots.begin(), failed_slots.end());
      return out;
    }
    st->outcomes.clear();
    if (st->stage == StopTimeStage::kReplay) {
      out.finished = true;
      return out;
    }
    const std::vector<StopTimeStage> stages = MachineStages(st->numeric);
    auto it = std::find(stages.begin(), stages.end(), st->stage);
    if (it == stages.end() || it + 1 == stages.end()) {
      out.finished = true;
      return out;
    }
    st->stage = *(it + 1);
    st->round = 0;
    st->stage_started_at = ctx.now;
  }
  return out;
}

}  // namespace peregrine
