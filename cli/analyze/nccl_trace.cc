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
#include "cli/analyze/nccl_trace_internal.h"
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
//  (b) NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs: see nccl_debug_log.cc.
//  (c) PyTorch profiler (Kineto) Chrome-trace JSON: see kineto_trace.cc.

namespace peregrine {
namespace nccl_internal {

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

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

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

}  // namespace

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
  std::vector<size_t> order(s.calls.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return s.calls[a].enter_ns < s.calls[b].enter_ns; });
  std::vector<NcclCallRecord> calls;
  std::vector<NcclCallDetail> details;
  for (size_t i : order) {
    calls.push_back(s.calls[i]);
    if (!s.details.empty()) details.push_back(s.details[i]);
  }
  s.calls = std::move(calls);
  s.details = std::move(details);
}

}  // namespace nccl_internal

namespace {

using analyze_internal::Excerpt;
using analyze_internal::SplitLines;
using analyze_internal::TextLine;
using nccl_internal::CommIdFromString;
using nccl_internal::DatatypeFromName;
using nccl_internal::LineError;
using nccl_internal::SortByTime;
using Json = nlohmann::json;

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
      return nccl_internal::ParseNcclLog(text, source);
    }
    return nccl_internal::ParseKineto(text, source);
  }
  if (text.find("NCCL INFO") != absl::string_view::npos) return nccl_internal::ParseNcclLog(text, source);
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

NcclTrace MergeNcclTraces(std::vector<NcclTrace> parts, const std::vector<std::string>& sources) {
  NcclTrace merged;
  if (parts.empty()) return merged;
  merged.format = parts[0].format;
  std::map<std::string, int> label_uses;
  for (const NcclTrace& t : parts) {
    for (const NcclCallStream& s : t.streams) ++label_uses[s.label];
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& source = i < sources.size() ? sources[i] : std::string("?");
    if (parts[i].format != merged.format) {
      merged.notes.push_back(absl::StrCat(source, ": ", NcclTraceFormatName(parts[i].format),
                                          " (the first file is ", NcclTraceFormatName(merged.format), ")"));
    }
    for (const std::string& n : parts[i].notes) merged.notes.push_back(absl::StrCat(source, ": ", n));
    merged.skipped_lines += parts[i].skipped_lines;
    for (NcclCallStream& s : parts[i].streams) {
      if (parts.size() > 1 && label_uses[s.label] > 1) s.label = absl::StrCat(source, ": ", s.label);
      merged.streams.push_back(std::move(s));
    }
  }
  // By rank when every stream knows it (the order of a single file's streams otherwise).
  const bool all_ranked = std::all_of(merged.streams.begin(), merged.streams.end(),
                                      [](const NcclCallStream& s) { return s.rank >= 0; });
  if (all_ranked && parts.size() > 1) {
    std::stable_sort(merged.streams.begin(), merged.streams.end(),
                     [](const NcclCallStream& a, const NcclCallStream& b) { return a.rank < b.rank; });
  }
  return merged;
}

}  // namespace peregrine
