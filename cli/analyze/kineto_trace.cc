// PyTorch profiler (Kineto) Chrome-trace JSON (format (c) of ParseNcclTrace):
// {"traceEvents":[...]} or a bare array; ts/dur are microseconds.
//
// Which events are the NCCL calls, in order of preference:
//  1. the complete ("ph":"X") CPU ops named "nccl:<collective>" (c10d's record_function);
//  2. else their GPU-annotation copies: Kineto repeats every user annotation on the GPU
//     timeline with "cat":"gpu_user_annotation" (same name, the GPU's times). They are the
//     same calls: when CPU ops exist the copies are dropped (counting both doubled every
//     period), and only a trace with copies alone uses them;
//  3. else the GPU kernels "ncclDevKernel_<Op>_..." / "ncclKernel_<Op>_...".
// The call's count, datatype, communicator, group size and sequence number come from the
// c10d metadata args that PyTorch attaches (torch/csrc/profiler/util.h; Kineto's
// output_json.cc copies them onto the kernels): "Collective name", "In msg nelems",
// "dtype", "Group size", "Process Group Name" (or "pg_name"), "Seq". A CPU op that lacks
// them takes them from the enclosing "record_param_comms" op of its thread (c10d records
// the metadata there, the nccl:* op nested inside), else from the NCCL kernel of the same
// collective at the same position (the k-th nccl:all_reduce <-> the k-th AllReduce kernel,
// when both sequences have the same length). "ProfilerStep#N" events mark iterations. The
// rank comes from "distributedInfo": {"rank": R}. "Process Group Name" names the same
// group on every rank (global_comm_ids); "Seq" is the group's sequence number (op_count).
//
// An event with a malformed ts/dur or step name is skipped and counted; the first problem
// is in the notes, and it is the error when neither a call nor a step is left.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/analyze/nccl_trace_internal.h"
#include "cli/analyze/text_input.h"

namespace peregrine::nccl_internal {
namespace {

using analyze_internal::Excerpt;
using analyze_internal::LineColumnOf;
using Json = nlohmann::json;

struct Event {
  NcclCallRecord record;
  NcclCallDetail detail;
  bool has_args = false;  // count/datatype known from the event's own args
  bool has_group = false;
  int64_t end_ns = 0;
  std::string thread;  // "pid/tid"
};

std::string ThreadOf(const Json& ev) {
  auto id = [&](const char* key) -> std::string {
    if (!ev.contains(key)) return "?";
    const Json& v = ev[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return absl::StrCat(v.get<int64_t>());
    return "?";
  };
  return absl::StrCat(id("pid"), "/", id("tid"));
}

// Reads the c10d metadata args into `e`; true when count and datatype were present.
void ReadCommsArgs(const Json& args, Event& e) {
  if (!args.is_object()) return;
  if (args.contains("Collective name") && args["Collective name"].is_string()) {
    const NcclOp op = NcclOpFromName(args["Collective name"].get<std::string>());
    if (op != NcclOp::kOther) e.record.op = op;
  }
  if (args.contains("In msg nelems") && args["In msg nelems"].is_number_integer()) {
    e.record.count = static_cast<uint64_t>(std::max<int64_t>(0, args["In msg nelems"].get<int64_t>()));
    e.has_args = true;
  }
  if (args.contains("dtype") && args["dtype"].is_string()) {
    e.record.datatype = DatatypeFromName(args["dtype"].get<std::string>());
  }
  for (const char* key : {"Process Group Name", "pg_name"}) {
    if (args.contains(key) && args[key].is_string()) {
      e.record.comm_id = CommIdFromString(args[key].get<std::string>());
      e.has_group = true;
      break;
    }
  }
  if (args.contains("Group size") && args["Group size"].is_number_integer()) {
    const int64_t n = args["Group size"].get<int64_t>();
    if (n > 0 && n < (1 << 30)) e.detail.nranks = static_cast<int>(n);
  }
  if (args.contains("Seq") && args["Seq"].is_number_integer() && args["Seq"].get<int64_t>() >= 0) {
    e.detail.op_count = args["Seq"].get<int64_t>();
  }
}

void CopyCommsFields(const Event& from, Event& to) {
  if (from.record.op != NcclOp::kOther && to.record.op == NcclOp::kOther) to.record.op = from.record.op;
  to.record.count = from.record.count;
  to.record.datatype = from.record.datatype;
  if (from.has_group) {
    to.record.comm_id = from.record.comm_id;
    to.has_group = true;
  }
  if (to.detail.nranks == 0) to.detail.nranks = from.detail.nranks;
  if (to.detail.op_count < 0) to.detail.op_count = from.detail.op_count;
  to.has_args = from.has_args;
}

}  // namespace

absl::StatusOr<NcclTrace> ParseKineto(absl::string_view text, absl::string_view source) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    const auto [line, column] = LineColumnOf(text, e.byte > 0 ? e.byte - 1 : 0);
    const bool at_end = e.byte >= text.size();
    return LineError(source, line,
                     absl::StrCat("column ", column, ": invalid JSON", at_end ? " (the document is cut short: a truncated file?)" : "",
                                  ": ", e.what()));
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
    if (d.contains("rank") && d["rank"].is_number_integer() && d["rank"].get<int64_t>() >= 0 &&
        d["rank"].get<int64_t>() < (1 << 30)) {
      stream.rank = d["rank"].get<int>();
      stream.label = absl::StrCat("rank ", stream.rank);
    }
  }
  stream.has_timestamps = true;
  stream.timestamp_resolution_ns = 1000;
  std::vector<Event> cpu, annotations, kernels, param_comms;
  int bad_events = 0;
  absl::Status first_problem;
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& ev = (*events)[i];
    auto problem = [&](absl::string_view what) {
      ++bad_events;
      if (first_problem.ok()) {
        first_problem = absl::InvalidArgumentError(absl::StrCat(source, ": traceEvents[", i, "]: ", what));
      }
    };
    if (!ev.is_object()) {
      problem(absl::StrCat("expected an event object, got ", ev.type_name()));
      continue;
    }
    if (!ev.contains("name") || !ev["name"].is_string()) continue;  // metadata without a name
    const std::string name = ev["name"].get<std::string>();
    const bool is_step = absl::StartsWith(name, "ProfilerStep#");
    const bool is_op = absl::StartsWith(name, "nccl:");
    const bool is_kernel = absl::StartsWith(name, "ncclDevKernel_") || absl::StartsWith(name, "ncclKernel_");
    const bool is_param_comms = name == "record_param_comms";
    if (!is_step && !is_op && !is_kernel && !is_param_comms) continue;
    if (!ev.contains("ph") || !ev["ph"].is_string() || ev["ph"].get<std::string>() != "X") continue;
    const std::string cat = ev.contains("cat") && ev["cat"].is_string() ? ev["cat"].get<std::string>() : "";
    if (!ev.contains("ts") || !ev["ts"].is_number() || !std::isfinite(ev["ts"].get<double>()) ||
        std::abs(ev["ts"].get<double>()) > 9e15) {
      problem(absl::StrCat(Excerpt(name), ": missing or non-numeric \"ts\""));
      continue;
    }
    const int64_t ts_ns = static_cast<int64_t>(std::llround(ev["ts"].get<double>() * 1000.0));
    double dur_us = 0;
    const bool has_dur = ev.contains("dur") && ev["dur"].is_number() && std::isfinite(ev["dur"].get<double>()) &&
                         ev["dur"].get<double>() >= 0 && ev["dur"].get<double>() < 9e15;
    if (has_dur) dur_us = ev["dur"].get<double>();
    if (is_step) {
      if (cat == "gpu_user_annotation") continue;  // the GPU copy of the step annotation
      ProfilerStepSpan span;
      if (!absl::SimpleAtoi(absl::string_view(name).substr(13), &span.step)) {
        problem(absl::StrCat("step name without a number: ", Excerpt(name)));
        continue;
      }
      if (!has_dur) {
        problem(absl::StrCat(Excerpt(name), ": missing or negative \"dur\""));
        continue;
      }
      span.start_ns = ts_ns;
      span.duration_ns = static_cast<int64_t>(std::llround(dur_us * 1000.0));
      stream.profiler_steps.push_back(span);
      continue;
    }
    Event e;
    e.record.enter_ns = ts_ns;
    e.end_ns = ts_ns + static_cast<int64_t>(std::llround(dur_us * 1000.0));
    e.thread = ThreadOf(ev);
    if (is_op) {
      e.record.op = NcclOpFromName(absl::string_view(name).substr(5));
    } else if (is_kernel) {
      absl::string_view rest = absl::string_view(name).substr(name.find('_') + 1);
      e.record.op = NcclOpFromName(rest.substr(0, rest.find('_')));
    }
    if (ev.contains("args")) ReadCommsArgs(ev["args"], e);
    if (is_param_comms) {
      param_comms.push_back(e);
    } else if (is_kernel) {
      kernels.push_back(e);
    } else if (cat == "gpu_user_annotation") {
      annotations.push_back(e);
    } else {
      cpu.push_back(e);
    }
  }
  auto by_time = [](const Event& a, const Event& b) { return a.record.enter_ns < b.record.enter_ns; };
  std::stable_sort(cpu.begin(), cpu.end(), by_time);
  std::stable_sort(annotations.begin(), annotations.end(), by_time);
  std::stable_sort(kernels.begin(), kernels.end(), by_time);
  std::stable_sort(param_comms.begin(), param_comms.end(), by_time);
  // Kernels by collective, to lend their args by position.
  std::map<NcclOp, std::vector<const Event*>> kernels_by_op;
  for (const Event& k : kernels) kernels_by_op[k.record.op].push_back(&k);
  auto fill_args = [&](std::vector<Event>& ops, int* from_param_comms, int* from_kernels) {
    std::map<NcclOp, std::vector<Event*>> ops_by_op;
    for (Event& e : ops) {
      if (e.has_args) continue;
      // The innermost record_param_comms of the same thread that encloses the op.
      const Event* best = nullptr;
      auto it = std::upper_bound(param_comms.begin(), param_comms.end(), e, by_time);
      while (it != param_comms.begin()) {
        --it;
        if (it->thread == e.thread && it->end_ns >= e.record.enter_ns && it->has_args) {
          best = &*it;
          break;
        }
        if (e.record.enter_ns - it->record.enter_ns > int64_t{10} * 1000 * 1000 * 1000) break;
      }
      if (best != nullptr && (best->record.op == e.record.op || best->record.op == NcclOp::kOther)) {
        CopyCommsFields(*best, e);
        ++*from_param_comms;
      }
    }
    for (Event& e : ops) ops_by_op[e.record.op].push_back(&e);
    for (auto& [op, list] : ops_by_op) {
      auto k = kernels_by_op.find(op);
      if (k == kernels_by_op.end() || k->second.size() != list.size()) continue;
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i]->has_args || !k->second[i]->has_args) continue;
        CopyCommsFields(*k->second[i], *list[i]);
        ++*from_kernels;
      }
    }
  };
  int from_param_comms = 0, from_kernels = 0;
  std::vector<Event>* chosen = nullptr;
  if (!cpu.empty()) {
    chosen = &cpu;
    trace.notes.push_back(absl::StrCat("NCCL calls: ", cpu.size(), " CPU-side nccl:* ops"));
    if (!annotations.empty()) {
      trace.notes.push_back(absl::StrCat(annotations.size(),
                                         " GPU-annotation copies of nccl:* ops (gpu_user_annotation) not counted "
                                         "again"));
    }
  } else if (!annotations.empty()) {
    chosen = &annotations;
    trace.notes.push_back(absl::StrCat("NCCL calls: ", annotations.size(),
                                       " nccl:* GPU annotations (the trace has no CPU-side nccl:* ops)"));
  } else {
    chosen = &kernels;
    trace.notes.push_back(absl::StrCat("NCCL calls: ", kernels.size(), " NCCL GPU kernels"));
  }
  if (chosen != &kernels) fill_args(*chosen, &from_param_comms, &from_kernels);
  if (from_param_comms > 0) {
    trace.notes.push_back(absl::StrCat(from_param_comms, " call(s) took count/dtype/group from record_param_comms"));
  }
  if (from_kernels > 0) {
    trace.notes.push_back(absl::StrCat(from_kernels, " call(s) took count/dtype/group from their NCCL kernel"));
  }
  const size_t without_args = static_cast<size_t>(
      std::count_if(chosen->begin(), chosen->end(), [](const Event& e) { return !e.has_args; }));
  if (without_args > 0) {
    trace.notes.push_back(absl::StrCat(without_args,
                                       " call(s) without count/dtype metadata (recorded without c10d's "
                                       "record_param_comms or kernel args)"));
  }
  bool all_grouped = !chosen->empty();
  for (const Event& e : *chosen) {
    stream.calls.push_back(e.record);
    stream.details.push_back(e.detail);
    all_grouped = all_grouped && e.has_group;
  }
  stream.global_comm_ids = all_grouped;
  if (stream.calls.empty() && stream.profiler_steps.empty()) {
    if (!first_problem.ok()) return first_problem;
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the trace has neither NCCL events (nccl:*, ncclDevKernel_*) nor ProfilerStep#N "
                "annotations; record it with torch.profiler including CUDA activities"));
  }
  trace.skipped_lines = bad_events;
  if (bad_events > 0) {
    trace.notes.push_back(absl::StrCat(bad_events, " malformed NCCL/step event(s) skipped; the first: ",
                                       first_problem.message()));
  }
  SortByTime(stream);
  std::sort(stream.profiler_steps.begin(), stream.profiler_steps.end(),
            [](const ProfilerStepSpan& a, const ProfilerStepSpan& b) { return a.start_ns < b.start_ns; });
  trace.streams.push_back(std::move(stream));
  return trace;
}

}  // namespace peregrine::nccl_internal
