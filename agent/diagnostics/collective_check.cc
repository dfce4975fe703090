// all_to_all (this machine's GPUs) and all_gather (a group of machines) through
// peregrine-nccl-check: one process per local GPU with the training environment.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "base/free_port.h"
#include "nlohmann/json.hpp"

namespace peregrine {
namespace {

struct CheckPlan {
  std::string op;
  int64_t bytes = 0;
  std::string master_addr;
  int master_port = 0;
  int world = 1;
  int comm_rank_base = 0;  // communicator rank of local GPU 0
};

struct RankReport {
  bool parsed = false;
  double algbw = 0, busbw = 0, peak_busbw = -1;  // -1: an older tool without the figure
  std::set<int> bad, nan;
};

RankReport ParseReport(const std::vector<std::string>& lines) {
  RankReport r;
  for (const std::string& line : lines) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("busbw_gbps")) continue;
    try {
      r.algbw = j.at("algbw_gbps").get<double>();
      r.busbw = j.at("busbw_gbps").get<double>();
      r.peak_busbw = j.value("peak_busbw_gbps", -1.0);
      for (const auto& s : j.at("bad_senders")) r.bad.insert(s.get<int>());
      for (const auto& s : j.at("nan_senders")) r.nan.insert(s.get<int>());
      r.parsed = true;
    } catch (const nlohmann::json::exception&) {
      r.parsed = false;
    }
  }
  return r;
}

// Runs the check on this machine's GPUs (communicator ranks comm_rank_base + local). Bad
// contributions from this machine's ranks become failed_ranks (global ranks); the detail
// names every bad communicator rank and its machine_index.
DiagnosticResultOr RunCheck(const DiagnosticInvocation& inv, const CheckPlan& plan, std::optional<double> min_gbps,
                            const std::string& where) {
  v1::DiagnosticResult result = NewResult(inv);
  absl::StatusOr<std::string> tool = ToolPath(inv, "peregrine-nccl-check");
  if (!tool.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(where, ": ", tool.status().message()));
    return result;
  }
  const int64_t left_ms = NcclTimeoutMs(inv, inv.clock->Now());
  absl::StatusOr<DiagnosticProcessesOutcome> run =
      RunRanks(inv, {plan.comm_rank_base, plan.world, plan.master_addr, plan.master_port}, left_ms,
               {*tool, "--op", plan.op, "--bytes", absl::StrCat(plan.bytes), "--repeats", "5", "--init-timeout-s",
                absl::StrCat(std::max<int64_t>(1, left_ms / 1000)), "--device-buffers",
                inv.InStandInCluster() ? "off" : "auto"});
  if (!run.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(where, ": cannot start peregrine-nccl-check: ", run.status().message()));
    return result;
  }
  std::set<int> bad, nan;
  double algbw = -1, busbw = -1, peak_busbw = -1;
  std::vector<std::string> errors;
  for (const DiagnosticProcessOutcome& p : run->processes) {
    RankReport r = ParseReport(p.lines);
    if (!r.parsed) {
      errors.push_back(absl::StrCat("gpu", p.index, " (rank ", plan.comm_rank_base + p.index, "): ", p.Describe()));
      continue;
    }
    bad.insert(r.bad.begin(), r.bad.end());
    nan.insert(r.nan.begin(), r.nan.end());
    algbw = algbw < 0 ? r.algbw : std::min(algbw, r.algbw);
    busbw = busbw < 0 ? r.busbw : std::min(busbw, r.busbw);
    if (r.peak_busbw >= 0) peak_busbw = peak_busbw < 0 ? r.peak_busbw : std::min(peak_busbw, r.peak_busbw);
  }
  if (algbw >= 0) {
    (*result.mutable_figures())["algbw_gbps"] = algbw;
    (*result.mutable_figures())["busbw_gbps"] = busbw;
    if (peak_busbw >= 0) (*result.mutable_figures())["peak_busbw_gbps"] = peak_busbw;
  }
  std::vector<std::string> problems;
  if (run->timed_out) problems.push_back(inv.TimedOutDetail());
  if (!errors.empty()) problems.push_back(absl::StrCat("NCCL error: ", absl::StrJoin(errors, "; ")));
  if (!bad.empty()) {
    std::vector<std::string> senders;
    for (int s : bad) {
      const int machine_index = s / inv.gpus;
      senders.push_back(absl::StrCat("rank ", s, " (machine_index ", machine_index, " gpu", s % inv.gpus,
                                     nan.count(s) ? ", NaN" : "", ")"));
      if (s >= plan.comm_rank_base && s < plan.comm_rank_base + inv.gpus) {
        result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + (s - plan.comm_rank_base)));
      }
    }
    problems.push_back(absl::StrCat("contents from ", absl::StrJoin(senders, ", "), " arrived wrong"));
  }
  if (min_gbps && algbw >= 0 && busbw < *min_gbps) {
    problems.push_back(absl::StrFormat("busbw %.3f GB/s below min_gbps %.3f", busbw, *min_gbps));
  }
  if (!problems.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(where, ": ", absl::StrJoin(problems, "; ")));
  }
  return result;
}

}  // namespace

DiagnosticResultOr RunAllToAll(const DiagnosticInvocation& inv) {
  absl::StatusOr<AllToAllOptions> o = ParseAllToAllOptions(inv.Params());
  if (!o.ok()) return o.status();
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) return port.status();
  CheckPlan plan{"all_to_all", o->bytes, "127.0.0.1", *port, inv.gpus, 0};
  return RunCheck(inv, plan, o->min_gbps, absl::StrCat("all_to_all over ", inv.gpus, " GPUs"));
}

DiagnosticResultOr RunAllGather(const DiagnosticInvocation& inv) {
  absl::StatusOr<AllGatherOptions> o = ParseAllGatherOptions(inv.Params());
  if (!o.ok()) return o.status();
  CheckPlan plan{"all_gather",
                 o->bytes,
                 o->group.master_addr,
                 o->group.master_port,
                 o->group.machines * inv.gpus,
                 o->group.machine_index * inv.gpus};
  const std::string where = absl::StrCat("all_gather", o->label.empty() ? "" : absl::StrCat(" group ", o->label),
                                         " (machine_index ", o->group.machine_index, " of ", o->group.machines, ")");
  return RunCheck(inv, plan, o->min_gbps, where);
}

}  // namespace peregrine
