// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs (format (b) of ParseNcclTrace).
//
// NCCL (src/enqueue.cc) prints one line per call, after debug.cc's
// "host:pid:tid [cudaDev] NCCL INFO " prefix:
//   "AllReduce: opCount 1a sendbuff 0x.. recvbuff 0x.. count 262144 datatype 7 op 0
//    root 0 comm 0x55.. [nranks=8] stream 0x.."
// opCount is hexadecimal and counts the operations of one communicator.
// Since NCCL 2.26, NCCL_DEBUG_TIMESTAMP_LEVELS=INFO prefixes a strftime timestamp,
// "[%F %T] " by default; "%Nf" adds fractions ("[%F %T.%6f] "). Accepted timestamps:
// "[YYYY-MM-DD HH:MM:SS(.frac)]", "[HH:MM:SS(.frac)]" or a number of seconds, with or
// without brackets.
//
// Launchers put their own prefix before each line of a worker's output; any number of
// these, in any order, come first:
//   Ray:      "(RayTrainWorker pid=615, ip=10.72.7.6) " (any actor name: a parenthesised
//             group holding "pid=");
//   torchrun: "[rank3]:" (--tee / --log-dir of PyTorch >= 2.2: the global rank) or
//             "[default3]:" (older: role "default" and the LOCAL rank);
//   Slurm:    "3: " (srun --label: the task id, taken as the rank), possibly padded.
// The marker is the LAST "NCCL INFO" / "NCCL WARN" of a line: when processes write to one
// terminal, a line can hold the start of another process's line before it; the prefix is
// read only after the previous marker. Lines without a marker (program output, another
// launcher's chatter, a call line cut from its prefix) are counted and skipped.
//
// One stream per host:pid and cudaDev (one process may drive several GPUs). Its rank: the
// launcher's global rank ([rankN], Slurm's N) when given, else the rank in the largest
// communicator the stream's process initialised ("comm 0x.. rank R nranks N cudaDev D ...
// Init COMPLETE", "ncclCommInitRank comm 0x.. rank R ..." in later versions). The Init line's
// "commId 0x.." (NCCL >= 2.19), logged by every member, names the communicator across
// processes: when every call's comm address maps to one, comm_id is that commId and the
// stream's global_comm_ids is set.
//
// opCount orders one communicator's calls: a decrease is a reset (a new communicator at
// the same address, or a restarted process), an increase by more than one a gap (lines
// lost, or the calls of a group); both are counted in the stream's notes. A call line
// without a readable count, datatype or comm, or with an unreadable prefix, is skipped and
// counted; the first such problem is in the notes, and it is the error when no call is left.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/analyze/nccl_trace_internal.h"
#include "cli/analyze/text_input.h"

namespace peregrine::nccl_internal {
namespace {

using analyze_internal::Excerpt;
using analyze_internal::SplitLines;
using analyze_internal::TextLine;

// True for "host:pid:tid": at least three ':'-separated parts, the last two numeric.
bool IsHostPidTid(absl::string_view token, std::string* host_pid) {
  const size_t last = token.rfind(':');
  if (last == absl::string_view::npos || last == 0) return false;
  const size_t middle = token.rfind(':', last - 1);
  if (middle == absl::string_view::npos || middle == 0) return false;
  int64_t pid = 0, tid = 0;
  if (!absl::SimpleAtoi(token.substr(middle + 1, last - middle - 1), &pid) ||
      !absl::SimpleAtoi(token.substr(last + 1), &tid)) {
    return false;
  }
  *host_pid = std::string(token.substr(0, last));
  return true;
}

// What a line's prefix (the text before "NCCL INFO") says.
struct LinePrefix {
  std::string process = "process";  // host:pid, or "process" when not logged
  int cuda_dev = -1;
  int launcher_rank = -1;        // [rankN] or Slurm's "N: "
  int launcher_local_rank = -1;  // [defaultN]
  absl::string_view timestamp;   // what is left between the launcher prefix and host:pid:tid
};

// "[rank3]:" / "[default3]:" at the start of `s` (then removed): true, *rank = 3.
bool TakeTorchrunPrefix(absl::string_view& s, absl::string_view word, int* rank) {
  if (!absl::StartsWith(s, absl::StrCat("[", word))) return false;
  const size_t close = s.find("]:");
  if (close == absl::string_view::npos) return false;
  int r = 0;
  if (!absl::SimpleAtoi(s.substr(word.size() + 1, close - word.size() - 1), &r) || r < 0) return false;
  *rank = r;
  s.remove_prefix(close + 2);
  return true;
}

LinePrefix ParsePrefix(absl::string_view prefix) {
  LinePrefix p;
  absl::string_view s = prefix;
  // Launcher prefixes, outermost first.
  for (bool more = true; more;) {
    more = false;
    s = absl::StripLeadingAsciiWhitespace(s);
    if (absl::StartsWith(s, "(")) {
      const size_t close = s.find(')');
      if (close != absl::string_view::npos && absl::StrContains(s.substr(0, close), "pid=")) {
        s.remove_prefix(close + 1);
        more = true;
        continue;
      }
    }
    if (TakeTorchrunPrefix(s, "rank", &p.launcher_rank) ||
        TakeTorchrunPrefix(s, "default", &p.launcher_local_rank)) {
      more = true;
      continue;
    }
    size_t digits = 0;
    while (digits < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
    if (digits > 0 && digits <= 7 && digits + 1 < s.size() && s[digits] == ':' &&
        (s[digits + 1] == ' ' || s[digits + 1] == '\t')) {
      (void)absl::SimpleAtoi(s.substr(0, digits), &p.launcher_rank);
      s.remove_prefix(digits + 1);
      more = true;
    }
  }
  // [timestamp] host:pid:tid [cudaDev]
  std::vector<absl::string_view> tokens = absl::StrSplit(s, ' ', absl::SkipEmpty());
  p.timestamp = s;
  for (size_t i = tokens.size(); i-- > 0;) {
    std::string host_pid;
    if (IsHostPidTid(tokens[i], &host_pid)) {
      p.process = host_pid;
      p.timestamp = s.substr(0, static_cast<size_t>(tokens[i].data() - s.data()));
      if (i + 1 < tokens.size()) {
        absl::string_view dev = tokens[i + 1];
        int d = 0;
        if (absl::StartsWith(dev, "[") && absl::EndsWith(dev, "]") &&
            absl::SimpleAtoi(dev.substr(1, dev.size() - 2), &d) && d >= 0) {
          p.cuda_dev = d;
        }
      }
      break;
    }
  }
  p.timestamp = absl::StripAsciiWhitespace(p.timestamp);
  return p;
}

// The position of the last "NCCL INFO" / "NCCL WARN" of `line` and the end of the one
// before it (0 when none).
struct Marker {
  size_t at = absl::string_view::npos;
  size_t previous_end = 0;
  bool info = false;
};

Marker FindMarker(absl::string_view line) {
  Marker m;
  size_t from = 0;
  while (true) {
    const size_t info = line.find("NCCL INFO", from);
    const size_t warn = line.find("NCCL WARN", from);
    const size_t next = std::min(info, warn);
    if (next == absl::string_view::npos) break;
    if (m.at != absl::string_view::npos) m.previous_end = m.at + 9;
    m.at = next;
    m.info = next == info;
    from = next + 9;
  }
  return m;
}

struct StreamState {
  NcclCallStream stream;
  bool all_timed = true;
  int min_digits = 9;
  int init_rank = -1, init_nranks = -1;
  int launcher_rank = -1, launcher_local_rank = -1;
  std::map<uint64_t, uint64_t> comm_to_commid;  // comm address -> commId (Init lines)
};

}  // namespace

absl::StatusOr<NcclTrace> ParseNcclLog(absl::string_view text, absl::string_view source) {
  NcclTrace trace;
  trace.format = NcclTraceFormat::kNcclDebugLog;
  std::map<std::string, size_t> by_key;
  std::vector<StreamState> states;
  int other_lines = 0;
  int bad_lines = 0;
  absl::Status first_problem;
  for (const TextLine& line : SplitLines(text)) {
    const Marker marker = FindMarker(line.text);
    if (marker.at == absl::string_view::npos) {
      if (!absl::StripAsciiWhitespace(line.text).empty()) ++other_lines;
      continue;
    }
    if (!marker.info) continue;  // NCCL WARN: NCCL's own, not a call
    const LinePrefix prefix = ParsePrefix(line.text.substr(marker.previous_end, marker.at - marker.previous_end));
    const absl::string_view payload = absl::StripAsciiWhitespace(line.text.substr(marker.at + 9));
    const bool is_call = payload.find(": opCount ") != absl::string_view::npos;
    // "comm 0x.. rank R nranks N ... - Init COMPLETE" (NCCL < 2.19), or the same after the
    // function name ("ncclCommInitRank comm 0x.. rank R ...") in later versions.
    const bool is_init = (absl::StartsWith(payload, "comm 0x") || absl::StrContains(payload, " comm 0x")) &&
                         absl::StrContains(payload, "Init COMPLETE");
    if (!is_call && !is_init) continue;
    const std::string key =
        prefix.cuda_dev >= 0 ? absl::StrCat(prefix.process, " [", prefix.cuda_dev, "]") : prefix.process;
    auto [it, fresh] = by_key.emplace(key, states.size());
    if (fresh) {
      StreamState st;
      st.stream.label = key;
      st.stream.cuda_dev = prefix.cuda_dev;
      states.push_back(std::move(st));
    }
    StreamState& state = states[it->second];
    if (prefix.launcher_rank >= 0) state.launcher_rank = prefix.launcher_rank;
    if (prefix.launcher_local_rank >= 0) state.launcher_local_rank = prefix.launcher_local_rank;
    std::vector<absl::string_view> words = absl::StrSplit(payload, ' ', absl::SkipEmpty());
    auto value_after = [&](absl::string_view key) -> std::optional<absl::string_view> {
      for (size_t i = 0; i + 1 < words.size(); ++i) {
        if (words[i] == key) return words[i + 1];
      }
      return std::nullopt;
    };
    if (is_init) {
      int rank = -1, nranks = -1;
      if (auto r = value_after("rank"); r && absl::SimpleAtoi(*r, &rank) && rank >= 0) {
        if (auto n = value_after("nranks"); !n || !absl::SimpleAtoi(*n, &nranks)) nranks = 0;
        if (nranks > state.init_nranks) {
          state.init_rank = rank;
          state.init_nranks = nranks;
        }
      }
      auto comm = value_after("comm");
      auto comm_id = value_after("commId");
      if (comm && comm_id) state.comm_to_commid[CommIdFromString(*comm)] = CommIdFromString(*comm_id);
      continue;
    }
    auto problem = [&](const std::string& message) {
      ++bad_lines;
      if (first_problem.ok()) first_problem = LineError(source, line.number, message);
    };
    NcclCallRecord r;
    NcclCallDetail detail;
    detail.line = line.number;
    const absl::string_view name = payload.substr(0, payload.find(": opCount "));
    r.op = NcclOpFromName(name);
    auto count = value_after("count");
    auto datatype = value_after("datatype");
    auto comm = value_after("comm");
    if (!count || !absl::SimpleAtoi(*count, &r.count)) {
      problem(absl::StrCat("NCCL ", Excerpt(name), " line without a numeric 'count': ", Excerpt(payload)));
      continue;
    }
    if (!datatype || !absl::SimpleAtoi(*datatype, &r.datatype)) {
      problem(absl::StrCat("NCCL ", Excerpt(name), " line without a numeric 'datatype': ", Excerpt(payload)));
      continue;
    }
    if (!comm) {
      problem(absl::StrCat("NCCL ", Excerpt(name), " line without 'comm': ", Excerpt(payload)));
      continue;
    }
    r.comm_id = CommIdFromString(*comm);
    uint64_t op_count = 0;
    if (auto oc = value_after("opCount"); oc && absl::SimpleHexAtoi(*oc, &op_count) &&
                                          op_count < (uint64_t{1} << 62)) {
      detail.op_count = static_cast<int64_t>(op_count);
    }
    for (absl::string_view w : words) {
      int n = 0;
      if (absl::StartsWith(w, "[nranks=") && absl::EndsWith(w, "]") &&
          absl::SimpleAtoi(w.substr(8, w.size() - 9), &n) && n > 0) {
        detail.nranks = n;
      }
    }
    if (prefix.timestamp.empty()) {
      state.all_timed = false;
    } else {
      std::optional<Timestamp> ts = ParseLogTimestamp(prefix.timestamp);
      if (!ts) {
        problem(absl::StrCat("unrecognised timestamp '", Excerpt(prefix.timestamp),
                             "' (expected [YYYY-MM-DD HH:MM:SS.ffffff], HH:MM:SS.ffffff or seconds, "
                             "after a launcher prefix: (Worker pid=N, ip=A), [rankN]:, [defaultN]: or N: )"));
        continue;
      }
      r.enter_ns = ts->ns;
      state.min_digits = std::min(state.min_digits, ts->fraction_digits);
    }
    state.stream.calls.push_back(r);
    state.stream.details.push_back(detail);
  }
  // Streams that only logged initialisation carry no calls.
  for (StreamState& st : states) {
    NcclCallStream& s = st.stream;
    if (s.calls.empty()) continue;
    s.has_timestamps = st.all_timed;
    if (!s.has_timestamps) {
      for (NcclCallRecord& r : s.calls) r.enter_ns = 0;
    } else {
      s.timestamp_resolution_ns = ResolutionNs(st.min_digits);
    }
    s.rank = st.launcher_rank >= 0 ? st.launcher_rank : st.init_rank;
    if (s.rank >= 0) {
      s.label = absl::StrCat("rank ", s.rank, " (", s.label, ")");
    } else if (st.launcher_local_rank >= 0) {
      s.label = absl::StrCat("local rank ", st.launcher_local_rank, " (", s.label, ")");
    }
    // Communicators named by commId when every call's address has one.
    const bool all_mapped = !st.comm_to_commid.empty() &&
                            std::all_of(s.calls.begin(), s.calls.end(), [&](const NcclCallRecord& r) {
                              return st.comm_to_commid.count(r.comm_id) > 0;
                            });
    if (all_mapped) {
      for (NcclCallRecord& r : s.calls) r.comm_id = st.comm_to_commid[r.comm_id];
      s.global_comm_ids = true;
    }
    SortByTime(s);
    // opCount per communicator: resets and gaps.
    std::map<uint64_t, int64_t> last;
    int resets = 0;
    int64_t gaps = 0;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      const int64_t oc = s.details[i].op_count;
      if (oc < 0) continue;
      auto [at, first] = last.emplace(s.calls[i].comm_id, oc);
      if (!first) {
        if (oc < at->second) {
          ++resets;
        } else if (oc > at->second + 1) {
          gaps += oc - at->second - 1;
        }
        at->second = oc;
      }
    }
    if (resets > 0) {
      trace.notes.push_back(absl::StrCat(s.label, ": opCount went back ", resets,
                                     " time(s) on a communicator (a new communicator at the same address, or a "
                                     "restarted process)"));
    }
    if (gaps > 0) {
      trace.notes.push_back(absl::StrCat(s.label, ": ", gaps,
                                     " opCount value(s) skipped (lines not logged or lost, or calls grouped in "
                                     "ncclGroupStart/End)"));
    }
    trace.streams.push_back(std::move(s));
  }
  if (trace.streams.empty()) {
    if (!first_problem.ok()) return first_problem;
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": no NCCL collective lines ('NCCL INFO <Op>: opCount ...'); capture them with "
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL"));
  }
  trace.skipped_lines = bad_lines;
  if (bad_lines > 0) {
    trace.notes.push_back(absl::StrCat(bad_lines, " unreadable NCCL call line(s) skipped; the first: ",
                                       first_problem.message()));
  }
  if (other_lines > 0) {
    trace.notes.push_back(absl::StrCat(other_lines, " non-NCCL lines skipped"));
  }
  return trace;
}

}  // namespace peregrine::nccl_internal
