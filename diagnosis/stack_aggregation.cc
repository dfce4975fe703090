#include "diagnosis/stack_aggregation.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <tuple>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "diagnosis/check.h"

// How stacks are aggregated (ByteRobust section 5.1): when a job hangs or its MFU drops,
// the stacks of every rank's training-related processes are captured, ranks with identical
// (normalised) stacks are grouped, the dominant group is taken as healthy and the others
// as outliers, and the smallest parallel group that covers the outliers is evicted whole
// ("over-eviction": fast isolation beats exact root cause).
//
// Normalisation (so that identical states compare equal across processes):
//   - addresses, thread ids, thread names and (by default) line numbers are dropped;
//   - function names lose argument lists, template arguments, lambda/closure decorations,
//     return types, glibc symbol versions (@@GLIBC_2.34) and gdb's __GI_ aliases;
//   - files are reduced to their base name (install prefixes differ between pods); a frame
//     without a file keeps its module's base name.
// Signature of a rank (the documented choice): for every process of the rank (the
// training process and its helpers: data-loader workers, checkpoint writers), the SET of
// normalised stacks of its selected threads; the rank's signature is the SET of its
// processes' signatures. Sets, not multisets, so that a pool of N identical workers and
// one of N+1 compare equal. By default all threads are selected (a root cause may sit in
// a helper thread or child process, as the paper observes); ThreadSelection::kMainThread
// keeps only each process's main thread when helper threads are too noisy.
// A rank absent from the input has the signature "<no stack captured>" (a process that
// cannot be attached to is itself suspicious).
//
// Choosing the group: eviction is per machine, so a group "contains" the outliers when
// its machines include every outlier rank's machine (rank-level containment would fail
// whenever a hung machine hosts several TP ranks). Among TP, PP and DP groups that do,
// the one with the fewest machines wins (ties: the one holding more of the suspect ranks,
// then fewer ranks, then TP < PP < DP, then the lower index). If none does, the union of the outliers' machines is evicted and the
// explanation says so.
//
// Ties. Size alone cannot name the healthy group when the two largest groups tie, or
// nearly tie (the second holds at least 3/4 of the largest's ranks): e.g. a rank stalls
// in its DataLoader, its TP peers wait in a TP all-reduce and everyone else in the DP
// all-reduce, two groups of similar size plus the lone culprit. Each group's main thread
// is classified (stack_frame_kinds.h). When some ranks wait in a collective:
//   1. groups with an idle signature (data loading, queue/lock, idle) are the suspects:
//      nothing external blocks a collective's members but a peer that never arrives. Those
//      whose ranks share a TP/PP/DP group with a waiting rank (the parallel layout says who
//      waits on whom) are kept when there are any. Confidence high for a single such group
//      smaller than the largest group, else medium;
//   2. else groups outside any collective (compute, unknown) are the suspects, chosen the
//      same way; confidence medium.
// Nothing separates the groups: a near tie takes the largest as healthy (confidence low);
// an exact tie evicts nothing (confidence low: capture again).

namespace peregrine {
namespace {

constexpr char kNoStack[] = "<no stack captured>";

bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}

absl::string_view BaseName(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Replaces C++ operator names whose symbols would confuse bracket stripping.
std::string ProtectOperators(absl::string_view in) {
  static const std::pair<const char*, const char*> kOps[] = {
      {"operator()", "operator_call"}, {"operator<<=", "operator_shl_assign"},
      {"operator>>=", "operator_shr_assign"}, {"operator<<", "operator_shl"},
      {"operator>>", "operator_shr"},  {"operator<=", "operator_le"},
      {"operator>=", "operator_ge"},   {"operator->", "operator_arrow"},
      {"operator<", "operator_lt"},    {"operator>", "operator_gt"},
      {"operator[]", "operator_index"}};
  std::string out(in);
  for (const auto& [from, to] : kOps) {
    size_t pos = 0;
    while ((pos = out.find(from, pos)) != std::string::npos) {
      out.replace(pos, strlen(from), to);
      pos += strlen(to);
    }
  }
  return out;
}

}  // namespace

std::string NormalizeFunctionName(absl::string_view function) {
  absl::string_view f = absl::StripAsciiWhitespace(function);
  if (f.empty()) return "??";
  // Python pseudo-functions ("<module>", "<lambda>") stay as they are.
  if (f.front() == '<') return std::string(f);
  for (absl::string_view version : {"@@", "@GLIBC", "@CXXABI", "@GCC"}) {
    size_t at = f.find(version);
    if (at != absl::string_view::npos && at > 0) f = f.substr(0, at);
  }
  const std::string protected_name = ProtectOperators(f);
  // Drop (...), {...}, [...] groups, and <...> groups that follow a name (templates).
  std::string out;
  int depth = 0;
  std::vector<char> stack;
  for (char c : protected_name) {
    const bool opens = c == '(' || c == '{' || c == '[' ||
                       (c == '<' && (depth > 0 || (!out.empty() && IsIdentChar(out.back()))));
    if (opens) {
      stack.push_back(c);
      ++depth;
      continue;
    }
    if (depth > 0) {
      const char open = stack.back();
      if ((c == ')' && open == '(') || (c == '}' && open == '{') || (c == ']' && open == '[') ||
          (c == '>' && open == '<')) {
        stack.pop_back();
        --depth;
      }
      continue;
    }
    out.push_back(c);
  }
  // Return type and qualifiers: keep the last space-separated token that is a name.
  absl::string_view name = absl::StripAsciiWhitespace(out);
  for (absl::string_view qualifier : {" const", " volatile", " &&", " &"}) {
    while (absl::ConsumeSuffix(&name, qualifier)) {
    }
  }
  size_t space = name.rfind(' ');
  if (space != absl::string_view::npos) name = name.substr(space + 1);
  if (absl::StartsWith(name, "__GI_")) name.remove_prefix(5);
  if (name.empty()) return std::string(absl::StripAsciiWhitespace(function));
  return std::string(name);
}

std::string NormalizeFrame(const StackFrame& frame, bool keep_line_number) {
  std::string out = NormalizeFunctionName(frame.function);
  if (!frame.file.empty()) {
    absl::StrAppend(&out, " @ ", BaseName(frame.file));
    if (keep_line_number && frame.line > 0) absl::StrAppend(&out, ":", frame.line);
  } else if (!frame.module.empty()) {
    absl::StrAppend(&out, " @ ", BaseName(frame.module));
  }
  return out;
}

namespace {

bool IsMainThread(const ProcessStack& process, const ThreadStack& thread) {
  if (process.pid != 0 && thread.thread_id == process.pid) return true;
  return thread.thread_name == "MainThread";
}

std::vector<const ThreadStack*> SelectedThreads(const ProcessStack& process,
                                                const StackAggregationOptions& options) {
  std::vector<const ThreadStack*> out;
  for (const ThreadStack& t : process.threads) {
    if (options.threads == ThreadSelection::kAllThreads || IsMainThread(process, t)) {
      out.push_back(&t);
    }
  }
  // A process whose main thread cannot be identified falls back to all its threads.
  if (out.empty()) {
    for (const ThreadStack& t : process.threads) out.push_back(&t);
  }
  return out;
}

std::string ThreadSignature(const ThreadStack& thread, const StackAggregationOptions& options) {
  std::vector<std::string> frames;
  for (const StackFrame& f : thread.frames) {
    if (options.max_frames > 0 && static_cast<int>(frames.size()) >= options.max_frames) break;
    frames.push_back(NormalizeFrame(f, options.keep_line_numbers));
  }
  return frames.empty() ? std::string("<empty stack>") : absl::StrJoin(frames, "\n");
}

// The innermost frames of the first process's main thread (or first thread).
std::string Summary(const RankStacks& rank, const StackAggregationOptions& options) {
  constexpr size_t kSummaryFrames = 4;
  if (rank.processes.empty()) return kNoStack;
  const ProcessStack& p = rank.processes.front();
  StackAggregationOptions main_only = options;
  main_only.threads = ThreadSelection::kMainThread;
  const std::vector<const ThreadStack*> threads = SelectedThreads(p, main_only);
  if (threads.empty() || threads.front()->frames.empty()) return "<empty stack>";
  std::vector<std::string> frames;
  for (const StackFrame& f : threads.front()->frames) {
    if (frames.size() == kSummaryFrames) break;
    frames.push_back(NormalizeFrame(f, options.keep_line_numbers));
  }
  return absl::StrJoin(frames, " <- ");
}

}  // namespace

std::string RankSignature(const RankStacks& rank, const StackAggregationOptions& options) {
  if (rank.processes.empty()) return kNoStack;
  std::set<std::string> processes;
  for (const ProcessStack& p : rank.processes) {
    std::set<std::string> threads;
    for (const ThreadStack* t : SelectedThreads(p, options)) {
      threads.insert(ThreadSignature(*t, options));
    }
    processes.insert(absl::StrJoin(threads, "\n--\n"));
  }
  return absl::StrJoin(processes, "\n====\n");
}

namespace {

constexpr GroupKind kKindOrder[] = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData};

std::string DescribeGroup(const ParallelLayout& layout, const CommGroup& group) {
  return absl::StrFormat("%s group %d (ranks %s; machines %s)", GroupKindName(group.kind),
                         group.index, absl::StrJoin(group.ranks, ","),
                         absl::StrJoin(layout.MachinesOfGroup(group), ","));
}

}  // namespace

OverEvictionChoice ChooseOverEviction(const ParallelLayout& layout,
                                      absl::Span<const int> suspect_ranks) {
  OverEvictionChoice choice;
  if (suspect_ranks.empty()) {
    choice.reason = "no suspect ranks";
    return choice;
  }
  std::set<int> suspect_machines;
  for (int rank : suspect_ranks) {
    PEREGRINE_CHECK(rank >= 0 && rank < layout.world_size()) << "rank " << rank;
    suspect_machines.insert(layout.MachineOf(rank));
  }
  const int first_machine = *suspect_machines.begin();
  const std::set<int> suspects(suspect_ranks.begin(), suspect_ranks.end());
  // (machines, suspects outside it, ranks, kind order, index) of the best group so far.
  std::optional<std::tuple<size_t, size_t, size_t, int, int>> best_key;
  for (int k = 0; k < 3; ++k) {
    const GroupKind kind = kKindOrder[k];
    std::set<int> indices;  // groups touching the first suspect machine
    for (int rank : layout.RanksOfMachine(first_machine)) {
      indices.insert(layout.GroupIndexOf(kind, rank));
    }
    for (int index : indices) {
      CommGroup group = layout.Group(kind, index);
      const std::vector<int> machines = layout.MachinesOfGroup(group);
      const std::set<int> machine_set(machines.begin(), machines.end());
      if (!std::includes(machine_set.begin(), machine_set.end(), suspect_machines.begin(),
                         suspect_machines.end())) {
        continue;
      }
      size_t outside = suspects.size();
      for (int rank : group.ranks) outside -= suspects.count(rank);
      auto key = std::make_tuple(machines.size(), outside, group.ranks.size(), k, index);
      if (!best_key || key < *best_key) {
        best_key = key;
        choice.group = std::move(group);
        choice.machines = machines;
      }
    }
  }
  if (choice.group) {
    std::sort(choice.machines.begin(), choice.machines.end());
    choice.reason = absl::StrCat("smallest parallel group covering the machines of all ",
                                 suspect_ranks.size(), " suspect rank(s): ",
                                 DescribeGroup(layout, *choice.group));
    return choice;
  }
  choice.machines.assign(suspect_machines.begin(), suspect_machines.end());
  choice.reason = absl::StrCat(
      "no single TP, PP or DP group covers the suspect ranks' machines; evicting the union "
      "of their machines (",
      absl::StrJoin(choice.machines, ","), ")");
  return choice;
}

namespace {

// The main thread of the rank's first process (or its first thread); null when none.
const ThreadStack* MainThreadOf(const RankStacks& rank) {
  if (rank.processes.empty()) return nullptr;
  StackAggregationOptions main_only;
  main_only.threads = ThreadSelection::kMainThread;
  const std::vector<const ThreadStack*> threads = SelectedThreads(rank.processes.front(), main_only);
  return threads.empty() ? nullptr : threads.front();
}

// Whether some rank of `waiting` shares a TP, PP or DP group with some rank of `group`.
bool SharesParallelGroup(const ParallelLayout& layout, const std::vector<int>& group,
                         const std::vector<int>& waiting) {
  const std::set<int> members(group.begin(), group.end());
  for (int rank : waiting) {
    for (GroupKind kind : kKindOrder) {
      for (int peer : layout.Group(kind, layout.GroupIndexOf(kind, rank)).ranks) {
        if (members.count(peer)) return true;
      }
    }
  }
  return false;
}

struct TieBreak {
  std::vector<int> suspect_groups;
  VerdictConfidence confidence = VerdictConfidence::kLow;
  std::string reason;
};

// The tie-break by activity (see the file comment). Empty suspect_groups: nothing separates.
TieBreak BreakTie(const ParallelLayout& layout, const std::vector<StackGroup>& groups) {
  TieBreak out;
  std::vector<int> waiting;  // ranks blocked in a collective
  for (const StackGroup& g : groups) {
    if (g.kind == FrameKind::kCollectiveWait) waiting.insert(waiting.end(), g.ranks.begin(), g.ranks.end());
  }
  if (waiting.empty()) return out;
  for (bool idle_only : {true, false}) {
    std::vector<int> candidates, waited_on;
    for (size_t i = 0; i < groups.size(); ++i) {
      const FrameKind kind = groups[i].kind;
      if (kind == FrameKind::kCollectiveWait) continue;
      if (idle_only != IsIdleSignature(kind)) continue;
      candidates.push_back(static_cast<int>(i));
      if (SharesParallelGroup(layout, groups[i].ranks, waiting)) waited_on.push_back(static_cast<int>(i));
    }
    if (candidates.empty()) continue;
    out.suspect_groups = waited_on.empty() ? candidates : waited_on;
    size_t ranks = 0;
    for (int i : out.suspect_groups) ranks += groups[static_cast<size_t>(i)].ranks.size();
    const bool lone_minority = out.suspect_groups.size() == 1 && ranks < groups[0].ranks.size();
    if (idle_only) {
      out.confidence = lone_minority && !waited_on.empty() ? VerdictConfidence::kHigh : VerdictConfidence::kMedium;
      out.reason = absl::StrCat("tie broken by idle signature: ",
                                lone_minority ? "a lone minority group" : "the groups", " in ",
                                FrameKindName(groups[static_cast<size_t>(out.suspect_groups[0])].kind),
                                waited_on.empty() ? " while other ranks wait in collectives"
                                                  : " while its TP/PP/DP peers wait in collectives");
    } else {
      out.confidence = VerdictConfidence::kMedium;
      out.reason = absl::StrCat("tie broken by collective waits: ranks outside any collective (",
                                FrameKindName(groups[static_cast<size_t>(out.suspect_groups[0])].kind), ") while ",
                                waited_on.empty() ? "other ranks" : "their TP/PP/DP peers", " wait in one");
    }
    return out;
  }
  return out;
}

// Main-thread frames of group i absent from every other group's main thread.
std::vector<std::string> DistinguishingFrames(const std::vector<std::vector<std::string>>& frames, size_t i) {
  constexpr size_t kMaxDistinguishing = 3;
  std::vector<std::string> out;
  for (const std::string& f : frames[i]) {
    bool elsewhere = false;
    for (size_t j = 0; j < frames.size() && !elsewhere; ++j) {
      if (j != i && std::find(frames[j].begin(), frames[j].end(), f) != frames[j].end()) elsewhere = true;
    }
    if (!elsewhere && std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
    if (out.size() == kMaxDistinguishing) break;
  }
  return out;
}

std::string ConfidenceText(const StackAggregation& a) {
  return absl::StrCat(" Confidence: ", VerdictConfidenceName(a.confidence), " (", a.confidence_reason, ").");
}

}  // namespace

const char* VerdictConfidenceName(VerdictConfidence confidence) {
  switch (confidence) {
    case VerdictConfidence::kHigh: return "high";
    case VerdictConfidence::kMedium: return "medium";
    case VerdictConfidence::kLow: return "low";
  }
  return "low";
}

absl::StatusOr<StackAggregation> AggregateStacks(const ParallelLayout& layout,
                                                 absl::Span<const RankStacks> ranks,
                                                 const StackAggregationOptions& options) {
  std::vector<const RankStacks*> by_rank(layout.world_size(), nullptr);
  for (const RankStacks& r : ranks) {
    if (r.rank < 0 || r.rank >= layout.world_size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d is outside the job (%s)", r.rank, layout.DebugString()));
    }
    if (by_rank[r.rank] != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d appears twice", r.rank));
    }
    by_rank[r.rank] = &r;
  }
  std::map<std::string, size_t> index_of;
  StackAggregation result;
  std::vector<std::vector<std::string>> main_frames;  // per group, as first created
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    const RankStacks empty{rank, {}};
    const RankStacks& r = by_rank[rank] != nullptr ? *by_rank[rank] : empty;
    std::string signature = RankSignature(r, options);
    auto [it, inserted] = index_of.emplace(signature, result.groups.size());
    if (inserted) {
      StackGroup g;
      g.signature = std::move(signature);
      g.summary = Summary(r, options);
      std::vector<std::string> frames;
      if (const ThreadStack* main = MainThreadOf(r)) {
        const ThreadActivity activity = ClassifyThread(*main);
        g.kind = activity.kind;
        g.kind_frame = activity.frame;
        for (const StackFrame& f : main->frames) frames.push_back(NormalizeFrame(f, options.keep_line_numbers));
      }
      result.groups.push_back(std::move(g));
      main_frames.push_back(std::move(frames));
    }
    result.groups[it->second].ranks.push_back(rank);
  }
  for (size_t i = 0; i < result.groups.size(); ++i) {
    result.groups[i].distinguishing_frames = DistinguishingFrames(main_frames, i);
  }
  std::stable_sort(result.groups.begin(), result.groups.end(),
                   [](const StackGroup& a, const StackGroup& b) {
                     if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
                     return a.ranks.front() < b.ranks.front();
                   });
  std::string groups_text;
  for (size_t i = 0; i < result.groups.size(); ++i) {
    const StackGroup& g = result.groups[i];
    absl::StrAppendFormat(&groups_text, "\n  group %d: %d rank(s) [%s], %s, main thread: %s", i,
                          g.ranks.size(), absl::StrJoin(g.ranks, ","), FrameKindName(g.kind), g.summary);
  }
  if (result.groups.size() == 1) {
    result.dominant_group = 0;
    result.confidence = VerdictConfidence::kHigh;
    result.confidence_reason = "every rank shows the same stacks";
    result.explanation = absl::StrCat("all ", layout.world_size(),
                                      " ranks show the same stacks: nothing to evict.", ConfidenceText(result),
                                      groups_text);
    return result;
  }
  const size_t largest = result.groups[0].ranks.size();
  const size_t second = result.groups[1].ranks.size();
  const bool exact_tie = largest == second;
  const bool near_tie = !exact_tie && second * 4 >= largest * 3;
  std::string verdict;
  if (!exact_tie && !near_tie) {
    result.dominant_group = 0;
    for (size_t i = 1; i < result.groups.size(); ++i) result.suspect_groups.push_back(static_cast<int>(i));
    result.confidence = result.groups.size() == 2 ? VerdictConfidence::kHigh : VerdictConfidence::kMedium;
    result.confidence_reason = result.groups.size() == 2 ? "unique minority group"
                                                         : absl::StrCat(result.groups.size() - 1, " outlier groups");
    verdict = absl::StrFormat("the dominant group (%d ranks) is taken as healthy", largest);
  } else {
    TieBreak tie = BreakTie(layout, result.groups);
    if (!tie.suspect_groups.empty()) {
      result.suspect_groups = tie.suspect_groups;
      result.confidence = tie.confidence;
      result.confidence_reason = tie.reason;
      for (size_t i = 0; i < result.groups.size(); ++i) {
        if (std::find(tie.suspect_groups.begin(), tie.suspect_groups.end(), static_cast<int>(i)) ==
            tie.suspect_groups.end()) {
          result.dominant_group = static_cast<int>(i);
          break;
        }
      }
      verdict = absl::StrFormat(
          "the largest groups %s (%d and %d ranks), so the ranks' activities decide and the other groups are taken "
          "as healthy",
          exact_tie ? "tie" : "nearly tie", largest, second);
    } else if (near_tie) {
      result.dominant_group = 0;
      for (size_t i = 1; i < result.groups.size(); ++i) result.suspect_groups.push_back(static_cast<int>(i));
      result.confidence = VerdictConfidence::kLow;
      result.confidence_reason = "near tie decided by size alone: no idle signature or collective wait separates the groups";
      verdict = absl::StrFormat("the largest group (%d ranks) barely outnumbers the next (%d) and is taken as healthy",
                                largest, second);
    } else {
      result.confidence = VerdictConfidence::kLow;
      result.confidence_reason = "tie, no signal: evict nothing, capture again";
      result.explanation = absl::StrCat(
          "no dominant stack: the two largest groups both have ", largest,
          " ranks and no idle signature or collective wait separates them, so no group can be taken as healthy; "
          "nothing evicted.",
          ConfidenceText(result), groups_text);
      return result;
    }
  }
  for (int i : result.suspect_groups) {
    for (int rank : result.groups[static_cast<size_t>(i)].ranks) result.suspect_ranks.push_back(rank);
  }
  std::sort(result.suspect_ranks.begin(), result.suspect_ranks.end());
  OverEvictionChoice choice = ChooseOverEviction(layout, result.suspect_ranks);
  result.chosen_group = choice.group;
  result.machines_to_evict = choice.machines;
  result.explanation = absl::StrFormat(
      "%d stack groups over %d ranks; %s; %d suspect rank(s) [%s] in %d outlier group(s); %s; evict machines "
      "[%s].%s%s",
      result.groups.size(), layout.world_size(), verdict, result.suspect_ranks.size(),
      absl::StrJoin(result.suspect_ranks, ","), result.suspect_groups.size(), choice.reason,
      absl::StrJoin(result.machines_to_evict, ","), ConfidenceText(result), groups_text);
  return result;
}

}  // namespace peregrine
