#include "cli/analyze/nccl_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/fnv1a.h"
#include "cli/analyze/text_input.h"

// The text formats ParseNcclTrace accepts, detected from the content:
//
//  (a) JSON lines: one object per line, one NCCL call each (for tools that export calls;
//      Peregrine itself writes binary rings, see ring_file.h):
//        {"op":"AllReduce","comm":"0x55d0c1a2b300","count":262144,"datatype":7,
//         "time_ns":1712000000123456789,"rank":0}
//      op: NCCL's name (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Send, Recv,
//      AllToAll; case and '_' ignored); comm: a number or a hex string; datatype: the
//      ncclDataType_t value; time_ns: the call's enter time (any epoch); rank optional
//      (calls are grouped into one stream per rank). These are NcclCallRecord fields.
//  (b) NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs. NCCL (src/enqueue.cc) prints one line per
//      call, after the "host:pid:tid [cudaDev] NCCL INFO " prefix:
//        "AllReduce: opCount 1a sendbuff 0x.. recvbuff 0x.. count 262144 datatype 7 op 0
//         root 0 comm 0x55.. [nranks=8] stream 0x.."
//      Since NCCL 2.26, NCCL_DEBUG_TIMESTAMP_LEVELS=INFO prefixes a strftime timestamp,
//      "[%F %T] " by default; "%Nf" adds fractions ("[%F %T.%6f] "). Accepted timestamps:
//      "[YYYY-MM-DD HH:MM:SS(.frac)]", "[HH:MM:SS(.frac)]" or a number of seconds, with or
//      without brackets. Lines of other subsystems and program output are skipped. One
//      stream per host:pid; its rank comes from the "comm 0x.. rank R nranks N ... Init
//      COMPLETE" line of the first communicator that process initialised, when logged.
//  (c) PyTorch profiler (Kineto) Chrome-trace JSON: {"traceEvents":[...]} or a bare array.
//      NCCL calls are the complete ("ph":"X") CPU events named "nccl:<collective>" when
//      any exist, else the GPU kernels named "ncclDevKernel_<Op>_..." / "ncclKernel_<Op>_..."
//      (args "In msg nelems", "dtype", "Process Group Name" give count, datatype and
//      communicator when present); ts/dur are microseconds. "ProfilerStep#N" events mark
//      iterations. The rank comes from "distributedInfo": {"rank": R} when present.

namespace peregrine {
namespace {

using analyze_internal::Excerpt;
using analyze_internal::LineColumnOf;
using analyze_internal::SplitLines;
using analyze_internal::TextLine;
using Json = nlohmann::json;

absl::Status LineError(absl::string_view source, int number, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", number, ": ", message));
}

// "0x55d0c1a2b300" -> its value; a decimal string -> its value; anything else -> a hash.
uint64_t CommIdFromString(absl::string_view s) {
  uint64_t v = 0;
  if ((absl::StartsWith(s, "0x") || absl::StartsWith(s, "0X")) &&
      absl::SimpleHexAtoi(s.substr(2), &v)) {
    return v;
  }
  if (absl::SimpleAtoi(s, &v)) return v;
  return Fnv1a(std::string_view(s.data(), s.size()));
}

// torch dtype names (Kineto "dtype" args) and NCCL names -> ncclDataType_t values.
int32_t DatatypeFromName(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (absl::StartsWith(n, "nccl")) n = n.substr(4);
  if (absl::StartsWith(n, "torch.")) n = n.substr(6);
  static const std::pair<const char*, int32_t> kNames[] = {
      {"int8", 0},     {"char", 0},    {"uint8", 1},    {"byte", 1},     {"int32", 2},
      {"int", 2},      {"uint32", 3},  {"int64", 4},    {"long", 4},     {"uint64", 5},
      {"float16", 6},  {"half", 6},    {"float32", 7},  {"float", 7},    {"float64", 8},
      {"double", 8},   {"bfloat16", 9}, {"bool", 0}};
  for (const auto& [key, value] : kNames) {
    if (n == key) return value;
  }
  return static_cast<int32_t>(100 + Fnv1a(n) % 1000);  // unknown: stable, distinct code
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

struct Timestamp {
  int64_t ns = 0;
  int fraction_digits = 0;
};

// "HH:MM:SS[.frac]" -> ns since midnight.
std::optional<Timestamp> ParseClock(absl::string_view s) {
  if (s.size() < 8 || s[2] != ':' || s[5] != ':') return std::nullopt;
  int h = 0, m = 0, sec = 0;
  if (!absl::SimpleAtoi(s.substr(0, 2), &h) || !absl::SimpleAtoi(s.substr(3, 2), &m) ||
      !absl::SimpleAtoi(s.substr(6, 2), &sec) || h > 23 || m > 59 || sec > 60) {
    return std::nullopt;
  }
  Timestamp t;
  t.ns = ((h * 60 + m) * 60 + sec) * int64_t{1000000000};
  absl::string_view rest = s.substr(8);
  if (!rest.empty()) {
    if (rest[0] != '.' && rest[0] != ',') return std::nullopt;
    rest.remove_prefix(1);
    if (rest.empty() || rest.size() > 9) return std::nullopt;
    int64_t frac = 0;
    for (char c : rest) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      frac = frac * 10 + (c - '0');
    }
    for (size_t i = rest.size(); i < 9; ++i) frac *= 10;
    t.ns += frac;
    t.fraction_digits = static_cast<int>(rest.size());
  }
  return t;
}

// The timestamp prefix of an NCCL log line (see the header); nullopt if unrecognised.
std::optional<Timestamp> ParseLogTimestamp(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (absl::StartsWith(s, "[") && absl::EndsWith(s, "]")) {
    s = absl::StripAsciiWhitespace(s.substr(1, s.size() - 2));
  }
  if (s.size() >= 19 && s[4] == '-' && s[7] == '-' && (s[10] == ' ' || s[10] == 'T')) {
    int y = 0, mo = 0, d = 0;
    if (!absl::SimpleAtoi(s.substr(0, 4), &y) || !absl::SimpleAtoi(s.substr(5, 2), &mo) ||
        !absl::SimpleAtoi(s.substr(8, 2), &d) || mo < 1 || mo > 12 || d < 1 || d > 31 ||
        y < 1678 || y > 2261) {  // nanoseconds since 1970 fit int64 only in these years
      return std::nullopt;
    }
    std::optional<Timestamp> clock = ParseClock(s.substr(11));
    if (!clock) return std::nullopt;
    clock->ns += DaysFromCivil(y, mo, d) * 86400 * int64_t{1000000000};
    return clock;
  }
  if (auto clock = ParseClock(s)) return clock;
  double seconds = 0;
  if (!s.empty() && absl::ascii_isdigit(static_cast<unsigned char>(s[0])) &&
      absl::SimpleAtod(s, &seconds) && std::isfinite(seconds) && seconds < 9.2e9) {
    Timestamp t;
    t.ns = static_cast<int64_t>(std::llround(seconds * 1e9));
    const size_t dot = s.find('.');
    t.fraction_digits = dot == absl::string_view::npos ? 0 : static_cast<int>(s.size() - dot - 1);
    return t;
  }
  return std::nullopt;
}

int64_t ResolutionNs(int fraction_digits) {
  int64_t r = 1000000000;
  for (int i = 0; i < fraction_digits && r > 1; ++i) r /= 10;
  return r;
}

void SortByTime(NcclCallStream& s) {
  if (!s.has_timestamps) return;
  std::stable_sort(s.calls.begin(), s.calls.end(),
                   [](const NcclCallRecord& a, const NcclCallRecord& b) { return a.enter_ns < b.enter_ns; });
}

// ---------------------------------------------------------------- (a) JSON lines

absl::StatusOr<NcclTrace> ParseJsonLines(absl::string_view text, absl::string_view source) {
  NcclTrace trace;
  trace.format = NcclTraceFormat::kPeregrineJsonl;
  std::map<int, size_t> by_rank;
  for (const TextLine& line : SplitLines(text)) {
    const absl::string_view t = absl::StripAsciiWhitespace(line.text);
    if (t.empty()) continue;
    Json j;
    try {
      j = Json::parse(t.begin(), t.end());
    } catch (const Json::parse_error& e) {
      return LineError(source, line.number,
                       absl::StrCat("column ", e.byte, ": not a JSON object: ", e.what()));
    } catch (const Json::exception& e) {  // e.g. a number out of range
      return LineError(source, line.number, absl::StrCat("not a JSON object: ", e.what()));
    }
    if (!j.is_object()) {
      return LineError(source, line.number, absl::StrCat("expected a JSON object, got ", j.type_name()));
    }
    auto field = [&](const char* name) -> absl::StatusOr<const Json*> {
      auto it = j.find(name);
      if (it == j.end()) {
        return LineError(source, line.number, absl::StrCat("missing field '", name,
                                                           "' (a call needs op, comm, count, datatype, time_ns)"));
      }
      return &*it;
    };
    NcclCallRecord r;
    absl::StatusOr<const Json*> op = field("op");
    if (!op.ok()) return op.status();
    if (!(*op)->is_string()) return LineError(source, line.number, "field 'op' must be a string");
    r.op = NcclOpFromName((*op)->get<std::string>());
    absl::StatusOr<const Json*> comm = field("comm");
    if (!comm.ok()) return comm.status();
    if ((*comm)->is_string()) {
      r.comm_id = CommIdFromString((*comm)->get<std::string>());
    } else if ((*comm)->is_number_unsigned() || (*comm)->is_number_integer()) {
      r.comm_id = (*comm)->get<uint64_t>();
    } else {
      return LineError(source, line.number, "field 'comm' must be a number or a string");
    }
    absl::StatusOr<const Json*> count = field("count");
    if (!count.ok()) return count.status();
    if (!(*count)->is_number_integer() || (*count)->get<int64_t>() < 0) {
      return LineError(source, line.number,
                       absl::StrCat("field 'count' must be a non-negative integer, got ", (*count)->dump()));
    }
    r.count = (*count)->get<uint64_t>();
    absl::StatusOr<const Json*> datatype = field("datatype");
    if (!datatype.ok()) return datatype.status();
    if ((*datatype)->is_number_integer()) {
      r.datatype = (*datatype)->get<int32_t>();
    } else if ((*datatype)->is_string()) {
      r.datatype = DatatypeFromName((*datatype)->get<std::string>());
    } else {
      return LineError(source, line.number, "field 'datatype' must be an integer or a name");
    }
    absl::StatusOr<const Json*> time = field("time_ns");
    if (!time.ok()) return time.status();
    if ((*time)->is_number_integer()) {
      r.enter_ns = (*time)->get<int64_t>();
    } else if ((*time)->is_number_float() && std::isfinite((*time)->get<double>())) {
      r.enter_ns = static_cast<int64_t>(std::llround((*time)->get<double>()));
    } else {
      return LineError(source, line.number,
                       absl::StrCat("field 'time_ns' must be a number, got ", Excerpt((*time)->dump())));
    }
    int rank = -1;
    if (auto it = j.find("rank"); it != j.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 30)) {
        return LineError(source, line.number, "field 'rank' must be a non-negative integer");
      }
      rank = it->get<int>();
    }
    auto [it, fresh] = by_rank.emplace(rank, trace.streams.size());
    if (fresh) {
      NcclCallStream s;
      s.rank = rank;
      s.label = rank >= 0 ? absl::StrCat("rank ", rank) : std::string("calls");
      s.has_timestamps = true;
      trace.streams.push_back(std::move(s));
    }
    trace.streams[it->second].calls.push_back(r);
  }
  for (NcclCallStream& s : trace.streams) SortByTime(s);
  std::stable_sort(trace.streams.begin(), trace.streams.end(),
                   [](const NcclCallStream& a, const NcclCallStream& b) { return a.rank < b.rank; });
  return trace;
}

// ---------------------------------------------------------------- (b) NCCL_DEBUG logs

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

absl::StatusOr<NcclTrace> ParseNcclLog(absl::string_view text, absl::string_view source) {
  NcclTrace trace;
  trace.format = NcclTraceFormat::kNcclDebugLog;
  std::map<std::string, size_t> by_process;
  std::map<std::string, bool> all_timed;
  std::map<std::string, int> min_digits;
  int skipped_lines = 0;
  for (const TextLine& line : SplitLines(text)) {
    const size_t info = line.text.find("NCCL INFO ");
    if (info == absl::string_view::npos) {
      if (!absl::StripAsciiWhitespace(line.text).empty()) ++skipped_lines;
      continue;
    }
    const absl::string_view prefix = line.text.substr(0, info);
    const absl::string_view payload = absl::StripAsciiWhitespace(line.text.substr(info + 10));
    // The prefix: [timestamp] host:pid:tid [cudaDev]
    std::string process = "process";
    absl::string_view timestamp_text;
    {
      std::vector<absl::string_view> tokens = absl::StrSplit(prefix, ' ', absl::SkipEmpty());
      for (size_t i = tokens.size(); i-- > 0;) {
        std::string host_pid;
        if (IsHostPidTid(tokens[i], &host_pid)) {
          process = host_pid;
          timestamp_text = prefix.substr(0, static_cast<size_t>(tokens[i].data() - prefix.data()));
          break;
        }
      }
    }
    const bool is_call = payload.find(": opCount ") != absl::string_view::npos;
    // "comm 0x.. rank R nranks N ... - Init COMPLETE" (NCCL < 2.19), or the same after the
    // function name ("ncclCommInitRank comm 0x.. rank R ...") in later versions.
    const bool is_init = (absl::StartsWith(payload, "comm 0x") || absl::StrContains(payload, " comm 0x")) &&
                         absl::StrContains(payload, "Init COMPLETE");
    if (!is_call && !is_init) continue;
    auto [it, fresh] = by_process.emplace(process, trace.streams.size());
    if (fresh) {
      NcclCallStream s;
      s.label = process;
      trace.streams.push_back(std::move(s));
      all_timed[process] = true;
      min_digits[process] = 9;
    }
    NcclCallStream& stream = trace.streams[it->second];
    std::vector<absl::string_view> words = absl::StrSplit(payload, ' ', absl::SkipEmpty());
    auto value_after = [&](absl::string_view key) -> std::optional<absl::string_view> {
      for (size_t i = 0; i + 1 < words.size(); ++i) {
        if (words[i] == key) return words[i + 1];
      }
      return std::nullopt;
    };
    if (is_init) {
      int rank = -1;
      if (auto r = value_after("rank"); r && absl::SimpleAtoi(*r, &rank) && stream.rank < 0) {
        stream.rank = rank;
      }
      continue;
    }
    NcclCallRecord r;
    const absl::string_view name = payload.substr(0, payload.find(": opCount "));
    r.op = NcclOpFromName(name);
    auto count = value_after("count");
    auto datatype = value_after("datatype");
    auto comm = value_after("comm");
    if (!count || !absl::SimpleAtoi(*count, &r.count)) {
      return LineError(source, line.number,
                       absl::StrCat("NCCL ", Excerpt(name), " line without a numeric 'count': ",
                                    Excerpt(payload)));
    }
    if (!datatype || !absl::SimpleAtoi(*datatype, &r.datatype)) {
      return LineError(source, line.number,
                       absl::StrCat("NCCL ", Excerpt(name), " line without a numeric 'datatype': ",
                                    Excerpt(payload)));
    }
    if (!comm) {
      return LineError(source, line.number,
                       absl::StrCat("NCCL ", Excerpt(name), " line without 'comm': ", Excerpt(payload)));
    }
    r.comm_id = CommIdFromString(*comm);
    if (absl::StripAsciiWhitespace(timestamp_text).empty()) {
      all_timed[process] = false;
    } else {
      std::optional<Timestamp> ts = ParseLogTimestamp(timestamp_text);
      if (!ts) {
        return LineError(source, line.number,
                         absl::StrCat("unrecognised timestamp '", Excerpt(absl::StripAsciiWhitespace(timestamp_text)),
                                      "' (expected [YYYY-MM-DD HH:MM:SS.ffffff], HH:MM:SS.ffffff or "
                                      "seconds)"));
      }
      r.enter_ns = ts->ns;
      min_digits[process] = std::min(min_digits[process], ts->fraction_digits);
    }
    stream.calls.push_back(r);
  }
  // Streams that only logged initialisation carry no calls.
  std::vector<NcclCallStream> streams;
  for (NcclCallStream& s : trace.streams) {
    if (s.calls.empty()) continue;
    s.has_timestamps = all_timed[s.label];
    if (!s.has_timestamps) {
      for (NcclCallRecord& r : s.calls) r.enter_ns = 0;
    } else {
      s.timestamp_resolution_ns = ResolutionNs(min_digits[s.label]);
    }
    if (s.rank >= 0) s.label = absl::StrCat("rank ", s.rank, " (", s.label, ")");
    SortByTime(s);
    streams.push_back(std::move(s));
  }
  trace.streams = std::move(streams);
  if (trace.streams.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": no NCCL collective lines ('NCCL INFO <Op>: opCount ...'); capture them with "
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL"));
  }
  if (skipped_lines > 0) {
    trace.notes.push_back(absl::StrCat(skipped_lines, " non-NCCL lines skipped"));
  }
  return trace;
}

// ---------------------------------------------------------------- (c) Kineto traces

absl::StatusOr<NcclTrace> ParseKineto(absl::string_view text, absl::string_view source) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    const auto [line, column] = LineColumnOf(text, e.byte > 0 ? e.byte - 1 : 0);
    return LineError(source, line, absl::StrCat("column ", column, ": invalid JSON: ", e.what()));
  } catch (const Json::exception& e) {  // e.g. a number out of range
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", e.what()));
  }
  const Json* events = nullptr;
  if (j.is_array()) {
    events = &j;
  } else if (j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array()) {
    events = &j["traceEvents"];
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": a JSON document without a \"traceEvents\" array is not a profiler trace"));
  }
  NcclTrace trace;
  trace.format = NcclTraceFormat::kKinetoTrace;
  NcclCallStream stream;
  stream.label = "trace";
  if (j.is_object() && j.contains("distributedInfo") && j["distributedInfo"].is_object()) {
    const Json& d = j["distributedInfo"];
    if (d.contains("rank") && d["rank"].is_number_integer()) {
      stream.rank = d["rank"].get<int>();
      stream.label = absl::StrCat("rank ", stream.rank);
    }
  }
  stream.has_timestamps = true;
  stream.timestamp_resolution_ns = 1000;
  std::vector<NcclCallRecord> cpu_calls, gpu_calls;
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& ev = (*events)[i];
    auto where = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": traceEvents[", i, "]: ", what));
    };
    if (!ev.is_object()) return where(absl::StrCat("expected an event object, got ", ev.type_name()));
    if (!ev.contains("name") || !ev["name"].is_string()) continue;  // metadata without a name
    const std::string name = ev["name"].get<std::string>();
    const bool is_step = absl::StartsWith(name, "ProfilerStep#");
    const bool is_cpu = absl::StartsWith(name, "nccl:");
    const bool is_gpu = absl::StartsWith(name, "ncclDevKernel_") || absl::StartsWith(name, "ncclKernel_");
    if (!is_step && !is_cpu && !is_gpu) continue;
    if (ev.value("ph", std::string()) != "X") continue;
    if (!ev.contains("ts") || !ev["ts"].is_number() || !std::isfinite(ev["ts"].get<double>())) {
      return where(absl::StrCat(Excerpt(name), ": missing or non-numeric \"ts\""));
    }
    const int64_t ts_ns = static_cast<int64_t>(std::llround(ev["ts"].get<double>() * 1000.0));
    if (is_step) {
      ProfilerStepSpan span;
      if (!absl::SimpleAtoi(absl::string_view(name).substr(13), &span.step)) {
        return where(absl::StrCat("step name without a number: ", Excerpt(name)));
      }
      if (!ev.contains("dur") || !ev["dur"].is_number() || ev["dur"].get<double>() < 0) {
        return where(absl::StrCat(Excerpt(name), ": missing or negative \"dur\""));
      }
      span.start_ns = ts_ns;
      span.duration_ns = static_cast<int64_t>(std::llround(ev["dur"].get<double>() * 1000.0));
      stream.profiler_steps.push_back(span);
      continue;
    }
    NcclCallRecord r;
    r.enter_ns = ts_ns;
    const Json empty = Json::object();
    const Json& args = ev.contains("args") && ev["args"].is_object() ? ev["args"] : empty;
    if (args.contains("Collective name") && args["Collective name"].is_string()) {
      r.op = NcclOpFromName(args["Collective name"].get<std::string>());
    } else if (is_cpu) {
      r.op = NcclOpFromName(absl::string_view(name).substr(5));
    } else {
      absl::string_view rest = absl::string_view(name).substr(name.find('_') + 1);
      r.op = NcclOpFromName(rest.substr(0, rest.find('_')));
    }
    if (args.contains("In msg nelems") && args["In msg nelems"].is_number_integer()) {
      r.count = static_cast<uint64_t>(std::max<int64_t>(0, args["In msg nelems"].get<int64_t>()));
    }
    if (args.contains("dtype") && args["dtype"].is_string()) {
      r.datatype = DatatypeFromName(args["dtype"].get<std::string>());
    }
    if (args.contains("Process Group Name") && args["Process Group Name"].is_string()) {
      r.comm_id = CommIdFromString(args["Process Group Name"].get<std::string>());
    }
    (is_cpu ? cpu_calls : gpu_calls).push_back(r);
  }
  if (!cpu_calls.empty()) {
    stream.calls = std::move(cpu_calls);
    trace.notes.push_back(absl::StrCat("NCCL calls: ", stream.calls.size(), " CPU-side nccl:* events"));
  } else {
    stream.calls = std::move(gpu_calls);
    trace.notes.push_back(absl::StrCat("NCCL calls: ", stream.calls.size(), " NCCL GPU kernels"));
  }
  if (stream.calls.empty() && stream.profiler_steps.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the trace has neither NCCL events (nccl:*, ncclDevKernel_*) nor ProfilerStep#N "
                "annotations; record it with torch.profiler including CUDA activities"));
  }
  SortByTime(stream);
  std::sort(stream.profiler_steps.begin(), stream.profiler_steps.end(),
            [](const ProfilerStepSpan& a, const ProfilerStepSpan& b) { return a.start_ns < b.start_ns; });
  trace.streams.push_back(std::move(stream));
  return trace;
}

}  // namespace

const char* NcclTraceFormatName(NcclTraceFormat format) {
  switch (format) {
    case NcclTraceFormat::kPeregrineJsonl: return "peregrine-jsonl";
    case NcclTraceFormat::kNcclDebugLog: return "nccl-debug-log";
    case NcclTraceFormat::kKinetoTrace: return "kineto-trace";
    case NcclTraceFormat::kPeregrineRing: return "peregrine-ring";
  }
  return "?";
}

const char* NcclOpName(NcclOp op) {
  switch (op) {
    case NcclOp::kAllReduce: return "AllReduce";
    case NcclOp::kAllGather: return "AllGather";
    case NcclOp::kReduceScatter: return "ReduceScatter";
    case NcclOp::kBroadcast: return "Broadcast";
    case NcclOp::kReduce: return "Reduce";
    case NcclOp::kSend: return "Send";
    case NcclOp::kRecv: return "Recv";
    case NcclOp::kAllToAll: return "AllToAll";
    case NcclOp::kOther: return "Other";
  }
  return "Other";
}

NcclOp NcclOpFromName(absl::string_view name) {
  std::string n;
  for (char c : name) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) n += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  if (absl::StartsWith(n, "nccl")) n = n.substr(4);
  if (absl::StrContains(n, "reducescatter")) return NcclOp::kReduceScatter;
  if (absl::StrContains(n, "allreduce")) return NcclOp::kAllReduce;
  if (absl::StrContains(n, "allgather")) return NcclOp::kAllGather;
  if (absl::StrContains(n, "alltoall")) return NcclOp::kAllToAll;
  if (absl::StrContains(n, "broadcast")) return NcclOp::kBroadcast;
  if (absl::StartsWith(n, "reduce")) return NcclOp::kReduce;
  if (absl::StartsWith(n, "send") && !absl::StartsWith(n, "sendrecv")) return NcclOp::kSend;
  if (absl::StartsWith(n, "recv")) return NcclOp::kRecv;
  return NcclOp::kOther;
}

absl::StatusOr<NcclTrace> ParseNcclTrace(absl::string_view text, absl::string_view source) {
  if (absl::Status s = analyze_internal::CheckText(text, source); !s.ok()) return s;
  const absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (absl::StartsWith(trimmed, "{") || absl::StartsWith(trimmed, "[")) {
    // JSON lines when the first line is a complete object; a profiler trace otherwise.
    const absl::string_view first = trimmed.substr(0, trimmed.find('\n'));
    if (absl::StartsWith(trimmed, "{")) {
      try {
        const absl::string_view f = absl::StripTrailingAsciiWhitespace(first);
        Json j = Json::parse(f.begin(), f.end());
        if (j.is_object() && !j.contains("traceEvents")) return ParseJsonLines(text, source);
      } catch (const Json::parse_error&) {
        // Not a one-line object: a (possibly pretty-printed) trace document.
      } catch (const Json::exception&) {
        // A complete line that does not convert (a number out of range): JSON lines,
        // whose parser names the line.
        return ParseJsonLines(text, source);
      }
    }
    // A bracket also opens NCCL's timestamped lines ("[2025-03-14 09:26:53] host:...").
    if (absl::StartsWith(trimmed, "[") && text.find("NCCL INFO") != absl::string_view::npos &&
        !Json::accept(text.begin(), text.end())) {
      return ParseNcclLog(text, source);
    }
    return ParseKineto(text, source);
  }
  if (text.find("NCCL INFO") != absl::string_view::npos) return ParseNcclLog(text, source);
  const std::vector<TextLine> lines = SplitLines(text);
  int number = 1;
  for (const TextLine& l : lines) {
    if (!absl::StripAsciiWhitespace(l.text).empty()) {
      number = l.number;
      break;
    }
  }
  return LineError(source, number,
                   "not a recognised NCCL call format: expected Peregrine JSON lines "
                   "({\"op\":...,\"time_ns\":...}), NCCL_DEBUG=INFO collective lines ('NCCL INFO "
                   "AllReduce: opCount ...') or a PyTorch profiler trace ({\"traceEvents\":[...]})");
}

}  // namespace peregrine
