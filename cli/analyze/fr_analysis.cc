#include "cli/analyze/fr_analysis.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/analyze/rank_ranges.h"

// Per process group (entries grouped by the group's name, which is the same on every rank;
// pg_id is a per-process counter):
//
// 1. Collective entries (not is_p2p) are indexed by collective_seq_id, which every member
//    increments once per collective, so equal ids on two ranks are meant to be the same
//    call. Where a rank holds several entries with one id (coalesced ops), the last counts.
// 2. The stuck collective is the lowest seq id that some rank holds unfinished and no rank
//    has completed (a collective completes on a rank only once every member took part, so a
//    completed copy anywhere means the others were merely dumped before noticing).
// 3. Members whose highest seq id is below it (or who hold no collective of the group)
//    never reached it; members that hold it unfinished wait in it. Members with no dump
//    are listed apart: nothing is known about them.
// 4. At every seq id held by two or more ranks the calls are compared the way PyTorch's
//    fr_trace does: operation, dtypes, input sizes (not for scatter and all_to_all) and
//    output sizes (not for gather and all_to_all). The most common call is the expected
//    one (a tie goes to the call of the lowest rank); each other call is a mismatch.
// 5. Sends and recvs: for every unfinished one the peer (group rank -> global rank through
//    the sorted member list, as fr_trace maps them) must have posted at least as many of
//    the matching op; otherwise it is reported as unmatched.
//
// Verdict, first that applies: a mismatch, missing ranks, missing dumps (the ranks with a
// dump all wait, some members left none), all stuck, p2p unmatched, p2p pending, healthy.

namespace peregrine {
namespace {

constexpr size_t kMaxMismatches = 10;

std::string Sizes(const std::vector<std::vector<int64_t>>& sizes) {
  std::vector<std::string> parts;
  for (const auto& s : sizes) parts.push_back(absl::StrCat("[", absl::StrJoin(s, ", "), "]"));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string Dtypes(const std::vector<std::string>& d) { return absl::StrCat("[", absl::StrJoin(d, ", "), "]"); }

std::string Detail(const FrEntry& e) {
  return absl::StrCat("in ", Sizes(e.input_sizes), " ", Dtypes(e.input_dtypes), ", out ", Sizes(e.output_sizes), " ",
                      Dtypes(e.output_dtypes));
}

// The first field in which `b` differs from `a` by fr_trace's rules, with both values.
std::optional<std::pair<std::string, std::pair<std::string, std::string>>> Difference(const FrEntry& a,
                                                                                        const FrEntry& b) {
  if (a.op != b.op) return std::make_pair(std::string("operation"), std::make_pair(a.profiling_name, b.profiling_name));
  if (a.input_dtypes != b.input_dtypes) {
    return std::make_pair(std::string("input dtypes"), std::make_pair(Dtypes(a.input_dtypes), Dtypes(b.input_dtypes)));
  }
  if (a.output_dtypes != b.output_dtypes) {
    return std::make_pair(std::string("output dtypes"), std::make_pair(Dtypes(a.output_dtypes), Dtypes(b.output_dtypes)));
  }
  const bool all_to_all = a.op == "all_to_all" || a.op == "all_to_all_base" || a.op == "alltoall_base";
  if (!all_to_all && a.op != "scatter" && a.input_sizes != b.input_sizes) {
    return std::make_pair(std::string("input sizes"), std::make_pair(Sizes(a.input_sizes), Sizes(b.input_sizes)));
  }
  if (!all_to_all && a.op != "gather" && a.output_sizes != b.output_sizes) {
    return std::make_pair(std::string("output sizes"), std::make_pair(Sizes(a.output_sizes), Sizes(b.output_sizes)));
  }
  return std::nullopt;
}

struct GroupData {
  std::string desc;
  std::set<int> config_ranks;
  std::set<int> ranks_with_entries;
  // rank -> seq -> last collective entry with that seq
  std::map<int, std::map<int64_t, const FrEntry*>> collectives;
  // rank -> p2p entries in order
  std::map<int, std::vector<const FrEntry*>> p2p;
};

void CompareCalls(const std::map<int, std::map<int64_t, const FrEntry*>>& by_rank, FrGroupReport* g) {
  std::map<int64_t, std::map<int, const FrEntry*>> by_seq;
  for (const auto& [rank, seqs] : by_rank) {
    for (const auto& [seq, e] : seqs) by_seq[seq][rank] = e;
  }
  for (const auto& [seq, calls] : by_seq) {
    if (calls.size() < 2) continue;
    // Classes of equal calls, in order of their lowest rank.
    std::vector<std::pair<const FrEntry*, std::vector<int>>> classes;
    for (const auto& [rank, e] : calls) {
      bool placed = false;
      for (auto& c : classes) {
        if (!Difference(*c.first, *e)) {
          c.second.push_back(rank);
          placed = true;
          break;
        }
      }
      if (!placed) classes.push_back({e, {rank}});
    }
    if (classes.size() < 2) continue;
    size_t best = 0;
    for (size_t i = 1; i < classes.size(); ++i) {
      if (classes[i].second.size() > classes[best].second.size()) best = i;
    }
    for (size_t i = 0; i < classes.size(); ++i) {
      if (i == best || g->mismatches.size() >= kMaxMismatches) continue;
      auto diff = Difference(*classes[best].first, *classes[i].first);
      g->mismatches.push_back(FrMismatch{seq, diff->first, diff->second.first, classes[best].second,
                                         diff->second.second, classes[i].second});
    }
  }
}

}  // namespace

absl::string_view FrVerdictName(FrVerdict verdict) {
  switch (verdict) {
    case FrVerdict::kHealthy: return "healthy";
    case FrVerdict::kMissingRanks: return "missing-ranks";
    case FrVerdict::kMismatch: return "mismatch";
    case FrVerdict::kAllStuck: return "all-stuck";
    case FrVerdict::kMissingDumps: return "missing-dumps";
    case FrVerdict::kP2pUnmatched: return "p2p-unmatched";
    case FrVerdict::kP2pPending: return "p2p-pending";
  }
  return "?";
}

FrReport AnalyzeFlightRecorder(const std::vector<FrRankDump>& dumps) {
  FrReport report;
  std::map<std::string, GroupData> groups;
  std::map<int, const FrDump*> by_rank;
  std::set<std::string> versions;
  for (const FrRankDump& d : dumps) {
    by_rank[d.rank] = &d.dump;
    versions.insert(d.dump.version);
    for (const auto& [name, config] : d.dump.pg_config) {
      GroupData& g = groups[name];
      if (g.desc.empty()) g.desc = config.desc;
      g.config_ranks.insert(config.ranks.begin(), config.ranks.end());
    }
    for (const FrEntry& e : d.dump.entries) {
      GroupData& g = groups[e.pg_name];
      if (g.desc.empty()) g.desc = e.pg_desc;
      g.ranks_with_entries.insert(d.rank);
      if (e.is_p2p) {
        g.p2p[d.rank].push_back(&e);
      } else {
        g.collectives[d.rank][e.collective_seq_id] = &e;
      }
    }
  }
  for (const auto& [rank, dump] : by_rank) report.ranks.push_back(rank);
  report.versions.assign(versions.begin(), versions.end());

  // Each rank's first unfinished op per group, for "pending elsewhere".
  std::map<int, std::map<std::string, const FrEntry*>> first_pending;
  for (const auto& [rank, dump] : by_rank) {
    for (const FrEntry& e : dump->entries) {
      if (e.state != FrState::kCompleted && !first_pending[rank].count(e.pg_name)) first_pending[rank][e.pg_name] = &e;
    }
  }

  for (const auto& group : groups) {
    const std::string& name = group.first;
    const GroupData& data = group.second;  // (a plain reference: lambdas below capture it)
    if (data.ranks_with_entries.empty()) continue;  // configured but never used here
    FrGroupReport g;
    g.name = name;
    g.desc = data.desc;
    std::set<int> members = data.config_ranks.empty() ? data.ranks_with_entries : data.config_ranks;
    members.insert(data.ranks_with_entries.begin(), data.ranks_with_entries.end());
    g.ranks.assign(members.begin(), members.end());

    // The stuck collective.
    std::set<int64_t> completed_somewhere;
    std::optional<int64_t> stuck;
    for (const auto& [rank, seqs] : data.collectives) {
      for (const auto& [seq, e] : seqs) {
        if (e->state == FrState::kCompleted) completed_somewhere.insert(seq);
      }
    }
    for (const auto& [rank, seqs] : data.collectives) {
      for (const auto& [seq, e] : seqs) {
        if (e->state != FrState::kCompleted && !completed_somewhere.count(seq) && (!stuck || seq < *stuck)) stuck = seq;
      }
    }

    for (int rank : g.ranks) {
      FrRankInGroup s;
      s.rank = rank;
      s.has_dump = by_rank.count(rank) > 0;
      if (!s.has_dump) {
        g.no_dump_ranks.push_back(rank);
        g.rank_states.push_back(s);
        continue;
      }
      auto it = data.collectives.find(rank);
      if (it != data.collectives.end() && !it->second.empty()) {
        const FrEntry* last = it->second.rbegin()->second;
        s.last_seq = last->collective_seq_id;
        s.last_profiling_name = last->profiling_name;
        s.last_state = last->state;
      }
      for (const auto& [other, e] : first_pending[rank]) {
        if (other == name) continue;
        s.pending_elsewhere = absl::StrCat("group ", other, ": ", e->profiling_name, " (collective seq ",
                                           e->collective_seq_id, ", ", FrStateName(e->state), ")");
        break;
      }
      if (stuck) {
        const FrEntry* at = nullptr;
        if (it != data.collectives.end()) {
          auto e = it->second.find(*stuck);
          if (e != it->second.end()) at = e->second;
        }
        if (at != nullptr) {
          g.waiting_ranks.push_back(rank);
          if (g.stuck_op.empty()) {
            g.stuck_op = at->profiling_name;
            g.stuck_detail = Detail(*at);
          }
        } else if (!s.last_seq || *s.last_seq < *stuck) {
          g.missing_ranks.push_back(rank);
        }
      }
      g.rank_states.push_back(s);
    }
    g.stuck_seq = stuck;
    CompareCalls(data.collectives, &g);

    // Point-to-point.
    std::vector<int> sorted(g.ranks.begin(), g.ranks.end());
    auto global_of = [&](int group_rank) {
      return group_rank >= 0 && static_cast<size_t>(group_rank) < sorted.size() && !data.config_ranks.empty()
                 ? sorted[group_rank]
                 : group_rank;
    };
    auto count = [&](int rank, absl::string_view op, int src, int dst) {
      int n = 0;
      auto it = data.p2p.find(rank);
      if (it == data.p2p.end()) return 0;
      for (const FrEntry* e : it->second) n += e->op == op && e->p2p_src == src && e->p2p_dst == dst;
      return n;
    };
    bool p2p_pending = false;
    bool p2p_unmatched = false;
    for (const auto& [rank, ops] : data.p2p) {
      for (const FrEntry* e : ops) {
        if (e->state == FrState::kCompleted || e->p2p_src < 0) continue;
        p2p_pending = true;
        const bool send = e->op == "send";
        const int peer = global_of(send ? e->p2p_dst : e->p2p_src);
        const absl::string_view peer_op = send ? "recv" : "send";
        const int mine = count(rank, e->op, e->p2p_src, e->p2p_dst);
        if (!by_rank.count(peer)) {
          g.p2p_findings.push_back(absl::StrCat("rank ", rank, ": ", e->profiling_name, " (", FrStateName(e->state),
                                                "): peer rank ", peer, " has no dump"));
          continue;
        }
        const int theirs = count(peer, peer_op, e->p2p_src, e->p2p_dst);
        if (theirs < mine) {
          p2p_unmatched = true;
          g.p2p_findings.push_back(absl::StrCat("rank ", rank, ": ", e->profiling_name, " (", FrStateName(e->state),
                                                "): rank ", peer, " posted ", theirs, " matching ", peer_op,
                                                "(s) for ", mine, " ", e->op, "(s): the peer never posted it"));
        } else {
          g.p2p_findings.push_back(absl::StrCat("rank ", rank, ": ", e->profiling_name, " (", FrStateName(e->state),
                                                "): rank ", peer, " posted the matching ", peer_op));
        }
      }
    }

    // Verdict.
    std::vector<std::string> why;
    if (!g.mismatches.empty()) {
      const FrMismatch& m = g.mismatches.front();
      g.verdict = FrVerdict::kMismatch;
      why.push_back(absl::StrCat("desync at collective seq ", m.seq, ": ranks ", RankRanges(m.ranks), " have ",
                                 m.field, " ", m.found, " where ranks ", RankRanges(m.expected_ranks), " have ",
                                 m.expected));
    }
    if (stuck && !g.missing_ranks.empty()) {
      if (g.mismatches.empty()) g.verdict = FrVerdict::kMissingRanks;
      why.push_back(absl::StrCat("ranks ", RankRanges(g.missing_ranks), " never reached ", g.stuck_op,
                                 " (collective seq ", *stuck, ") that ranks ", RankRanges(g.waiting_ranks),
                                 " are waiting in"));
    } else if (stuck && g.mismatches.empty() && !g.no_dump_ranks.empty()) {
      g.verdict = FrVerdict::kMissingDumps;
      why.push_back(absl::StrCat("ranks ", RankRanges(g.waiting_ranks), " wait in ", g.stuck_op, " (collective seq ",
                                 *stuck, "); ranks ", RankRanges(g.no_dump_ranks),
                                 " left no readable dump and may be the ones that never reached it"));
    } else if (stuck && g.mismatches.empty()) {
      g.verdict = FrVerdict::kAllStuck;
      why.push_back(absl::StrCat("ranks ", RankRanges(g.waiting_ranks), " are all in ", g.stuck_op,
                                 " (collective seq ", *stuck,
                                 ") and none completed it: no rank is missing; suspect the collective itself "
                                 "(network, NCCL or a GPU)"));
    }
    if (!stuck && g.mismatches.empty()) {
      g.verdict = p2p_unmatched ? FrVerdict::kP2pUnmatched : p2p_pending ? FrVerdict::kP2pPending : FrVerdict::kHealthy;
      why.push_back(p2p_unmatched  ? "no collective pending; a send/recv has no matching op on its peer"
                    : p2p_pending ? "no collective pending; send/recv ops pending with their peers' ops posted"
                                  : "no collective pending");
    }
    if (!g.no_dump_ranks.empty() && g.verdict != FrVerdict::kMissingDumps) {
      why.push_back(absl::StrCat("no dump from ranks ", RankRanges(g.no_dump_ranks), ": nothing known about them"));
    }
    g.explanation = absl::StrJoin(why, "; ");
    report.groups.push_back(std::move(g));
  }
  return report;
}

}  // namespace peregrine
