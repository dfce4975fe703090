// p2p_rounds: this machine's part of the O(1) link-validation rounds, through
// peregrine-linkcheck --plan (one process per local GPU, communicator ranks rank_base + g).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "nlohmann/json.hpp"

namespace peregrine {

DiagnosticResultOr RunP2pRounds(const DiagnosticInvocation& inv) {
  absl::StatusOr<P2pRoundsOptions> o = ParseP2pRoundsOptions(inv.Params());
  if (!o.ok()) return o.status();
  if (o->rank_base + inv.gpus > o->ranks) {
    return inv.Params().Invalid("rank_base", absl::StrCat(o->rank_base, " + ", inv.gpus, " GPUs exceeds ranks ",
                                                          o->ranks));
  }
  v1::DiagnosticResult result = NewResult(inv);
  absl::StatusOr<std::string> tool = ToolPath(inv, "peregrine-linkcheck");
  if (!tool.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("p2p_rounds: ", tool.status().message()));
    return result;
  }
  const int64_t left_ms = NcclTimeoutMs(inv, inv.clock->Now());
  absl::StatusOr<DiagnosticProcessesOutcome> run =
      RunRanks(inv, {o->rank_base, o->ranks, o->master_addr, o->master_port}, left_ms,
               {*tool, "--plan", o->rounds, "--bytes", absl::StrCat(o->bytes), "--all-ranks", "--init-timeout-s",
                absl::StrCat(std::max<int64_t>(1, left_ms / 1000)), "--device-buffers",
                inv.InStandInCluster() ? "off" : "auto"});
  if (!run.ok()) return run.status();
  std::vector<std::string> problems;
  if (run->timed_out) problems.push_back(inv.TimedOutDetail());
  bool have_report = false;
  for (const DiagnosticProcessOutcome& p : run->processes) {
    // Exit 1 only means the tool judged a link slow; the controller judges across machines.
    const bool ran = !p.killed && p.signal == 0 && (p.exit_code == 0 || p.exit_code == 1);
    nlohmann::json report;
    for (const std::string& line : p.lines) {
      if (line.empty() || line[0] != '{') continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("links") && j["links"].is_array()) report = j;
    }
    if (!ran || report.is_null()) {
      if (!(run->timed_out && p.killed)) {
        problems.push_back(absl::StrCat("rank ", o->rank_base + p.index, ": ", p.Describe()));
      }
      continue;
    }
    if (have_report) continue;  // every rank prints the same links
    have_report = true;
    for (const nlohmann::json& link : report["links"]) {
      if (!link.is_object() || !link.contains("receiver") || !link.contains("sender") || !link.contains("seconds")) {
        continue;
      }
      const int receiver = link["receiver"].get<int>();
      const double seconds = link["seconds"].get<double>();
      if (receiver < o->rank_base || receiver >= o->rank_base + inv.gpus || seconds <= 0) continue;
      (*result.mutable_figures())[absl::StrCat("link_", link["sender"].get<int>(), "_", receiver, "_gbps")] =
          static_cast<double>(o->bytes) / seconds / 1e9;
    }
  }
  if (!problems.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("p2p_rounds: ", absl::StrJoin(problems, "; ")));
  }
  return result;
}

}  // namespace peregrine
