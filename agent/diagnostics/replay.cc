// replay: the job's training command under a reduced layout on a group of machines
// (dual-phase replay); the digest covers the exact loss and grad-norm bits it printed.
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "base/fnv1a.h"

namespace peregrine {
namespace {

constexpr absl::string_view kReplayPrefix = "[peregrine] replay ";

struct ReplayStep {
  std::string text;  // "step=N loss_bits=H grad_norm_bits=H"
  bool nan = false;
  double loss = 0;
};

// step -> its line, from one rank's output.
std::map<int, ReplayStep> ParseReplayLines(const std::vector<std::string>& lines) {
  std::map<int, ReplayStep> steps;
  for (const std::string& line : lines) {
    if (!absl::StartsWith(line, kReplayPrefix)) continue;
    int step = -1;
    uint64_t loss_bits = 0, norm_bits = 0;
    bool have_loss = false, have_norm = false;
    for (absl::string_view field : absl::StrSplit(line.substr(kReplayPrefix.size()), ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (kv.first == "step") {
        if (!absl::SimpleAtoi(kv.second, &step)) step = -1;
      } else if (kv.first == "loss_bits") {
        have_loss = absl::SimpleHexAtoi(kv.second, &loss_bits);
      } else if (kv.first == "grad_norm_bits") {
        have_norm = absl::SimpleHexAtoi(kv.second, &norm_bits);
      }
    }
    if (step < 0 || !have_loss || !have_norm) continue;
    ReplayStep s;
    s.text = line.substr(kReplayPrefix.size());
    double loss, norm;
    std::memcpy(&loss, &loss_bits, sizeof(loss));
    std::memcpy(&norm, &norm_bits, sizeof(norm));
    s.nan = std::isnan(loss) || std::isnan(norm);
    s.loss = loss;
    steps[step] = s;
  }
  return steps;
}

}  // namespace

DiagnosticResultOr RunReplay(const DiagnosticInvocation& inv) {
  absl::StatusOr<ReplayOptions> o = ParseReplayOptions(inv.Params());
  if (!o.ok()) return o.status();
  const DiagnosticParams params = inv.Params();
  const int64_t world = static_cast<int64_t>(o->group.machines) * inv.gpus;
  if (static_cast<int64_t>(o->tp) * o->pp * o->dp != world) {
    return params.Invalid("tp", absl::StrCat("tp*pp*dp = ", static_cast<int64_t>(o->tp) * o->pp * o->dp,
                                             " but the group has machines*gpus = ", world, " ranks"));
  }
  if (inv.command.empty()) {
    return absl::FailedPreconditionError("replay: this agent holds no assignment with a training command");
  }
  v1::DiagnosticResult result = NewResult(inv);
  const int64_t left_ms = NcclTimeoutMs(inv, inv.clock->Now());
  std::vector<DiagnosticProcess> processes;
  for (int g = 0; g < inv.gpus; ++g) {
    std::map<std::string, std::string> env = RankEnvironment(
        inv, {o->group.machine_index * inv.gpus, world, o->group.master_addr, o->group.master_port}, g, left_ms);
    env["NODE_RANK"] = absl::StrCat(o->group.machine_index);
    env["NNODES"] = absl::StrCat(o->group.machines);
    env["PEREGRINE_TP"] = absl::StrCat(o->tp);
    env["PEREGRINE_PP"] = absl::StrCat(o->pp);
    env["PEREGRINE_DP"] = absl::StrCat(o->dp);
    env["PEREGRINE_RESUME_STEP"] = "0";
    env["PEREGRINE_ATTEMPT"] = "0";
    env["PEREGRINE_REPLAY"] = "1";
    env["PEREGRINE_REPLAY_STEPS"] = absl::StrCat(o->steps);
    if (o->layers > 0) {
      env["PEREGRINE_REPLAY_LAYERS"] = absl::StrCat(o->layers);
    } else {
      env.erase("PEREGRINE_REPLAY_LAYERS");
    }
    if (o->seed) {
      env["PEREGRINE_REPLAY_SEED"] = absl::StrCat(*o->seed);
    } else {
      env.erase("PEREGRINE_REPLAY_SEED");
    }
    processes.push_back(DiagnosticProcess{g, inv.command, FlattenEnv(env)});
  }
  RunProcessesOptions options;
  options.deadline = inv.deadline;
  options.clock = inv.clock;
  absl::StatusOr<DiagnosticProcessesOutcome> run = RunProcesses(processes, options);
  const std::string where = absl::StrCat("replay (machine_index ", o->group.machine_index, " of ", o->group.machines,
                                         ", tp ", o->tp, " pp ", o->pp, " dp ", o->dp, ")");
  if (!run.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(where, ": cannot start the training command: ", run.status().message()));
    return result;
  }
  std::vector<std::string> problems;
  if (run->timed_out) problems.push_back(inv.TimedOutDetail());
  std::optional<std::map<int, ReplayStep>> reference;
  bool disagree = false, nan = false;
  for (const DiagnosticProcessOutcome& p : run->processes) {
    if (!p.ok() && !(run->timed_out && p.killed)) {
      problems.push_back(absl::StrCat("rank ", o->group.machine_index * inv.gpus + p.index, ": ", p.Describe()));
    }
    std::map<int, ReplayStep> steps = ParseReplayLines(p.lines);
    for (const auto& [step, s] : steps) nan = nan || s.nan;
    if (!reference) {
      reference = std::move(steps);
      continue;
    }
    if (steps.size() != reference->size()) {
      disagree = true;
      continue;
    }
    for (const auto& [step, s] : steps) {
      auto it = reference->find(step);
      disagree = disagree || it == reference->end() || it->second.text != s.text;
    }
  }
  uint64_t digest = kFnv1aOffsetBasis;
  if (reference) {
    for (const auto& [step, s] : *reference) {
      digest = Fnv1a(s.text, digest);
      digest = Fnv1a("\n", digest);
    }
    (*result.mutable_figures())["steps"] = static_cast<double>(reference->size());
    if (!reference->empty()) (*result.mutable_figures())["last_loss"] = reference->rbegin()->second.loss;
    if (static_cast<int>(reference->size()) != o->steps && problems.empty()) {
      problems.push_back(absl::StrCat("printed ", reference->size(), " of ", o->steps, " replay steps"));
    }
  }
  result.set_digest(Hex64(digest));
  if (nan) problems.push_back("NaN loss or grad-norm");
  if (disagree) problems.push_back("this machine's ranks printed different losses");
  if (!problems.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(where, ": ", absl::StrJoin(problems, "; ")));
  }
  return result;
}

}  // namespace peregrine
