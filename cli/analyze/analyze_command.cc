#include "cli/analyze/analyze_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/analyze/analysis_args.h"
#include "cli/analyze/rank_ranges.h"
#include "cli/analyze/fr_command.h"
#include "cli/analyze/input_file.h"
#include "cli/analyze/nccl_desync.h"
#include "cli/analyze/ring_file.h"

namespace peregrine {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kUsage[] =
    "usage: peregrinectl analyze steps FILE [--format auto|long|wide] [--worker-col C] [--step-col C]\n"
    "                                       [--time-col C] [--unit s|ms|us|ns|min] [--strict]\n"
    "                                       [--verify R] [--prob P] [--json]\n"
    "                                       [--straggler-z Z] [--straggler-excess E]\n"
    "       peregrinectl analyze nccl FILE|DIR... [--rank N] [--verify R] [--prob P] [--json]\n"
    "       peregrinectl analyze stacks DIR --tp T --pp P --dp D --gpus-per-machine G\n"
    "                                       [--threads all|main] [--json]\n"
    "       peregrinectl analyze fr DIR [--prefix P] [--json]\n"
    "\n"
    "steps: iteration/step times as CSV (',', tab or ';'; a UTF-8 BOM and CRLF are fine) or\n"
    "  JSON lines ({\"rank\":0,\"step\":12,\"time\":0.31} per line).\n"
    "  long:  one row per worker and step, header naming a worker column (worker, rank, host,\n"
    "         node, pod, ...), a step column (step, iteration, iter) and a time column\n"
    "         (seconds, time, duration: seconds; iter_ms, duration_ms, time_ms, ms: milliseconds);\n"
    "         other columns are ignored. --worker-col, --step-col, --time-col name the columns\n"
    "         (header name, any case, or 1-based index: needed when the file has no header).\n"
    "         Without a worker column the file is one series; without a step column each\n"
    "         worker's rows are numbered 0, 1, 2, ... in file order.\n"
    "  wide:  one column per worker (the header names them), one row per step; an optional\n"
    "         step/iteration column (or --step-col) numbers the rows (else 0, 1, 2, ...); empty\n"
    "         cells are gaps; '__MIN'/'__MAX' columns (a W&B chart export's envelope) are ignored.\n"
    "  auto (default): long when a time column is named or found, else wide.\n"
    "  --unit: the unit of the times, overriding the time column's name (wide tables name\n"
    "  none). Times are converted to seconds, and reported in s, ms or us, whichever reads\n"
    "  best (the output names it). Steps are reported as written: when every k-th step is\n"
    "  logged the stride k is reported, and gaps are counted. Unreadable rows (bad number,\n"
    "  missing cell, negative or non-finite time) are skipped and duplicate rows dropped\n"
    "  (conflicting ones keep the first), each counted with the first lines and reasons in\n"
    "  the notes; --strict makes the first such row an error instead.\n"
    "  Each step is compared across the workers that logged it (3 or more): its median and\n"
    "  robust spread (1.4826 x MAD, at least 1% of the median). A change every worker shares\n"
    "  moves the median: it is reported once, as a JOB-WIDE change with its onset and size.\n"
    "  Per worker, change points of its time relative to the step median (Bayesian online\n"
    "  change-point detection, then verification: kept only when the mean AND the median after\n"
    "  the change differ from before by at least --verify, default 0.1 = 10%; --prob, default\n"
    "  0.9, is the posterior needed to report a change) give SLOWDOWN episodes relative to the\n"
    "  peers, with onset, end and severity. A worker is PERSISTENTLY SLOW when, over its compared\n"
    "  steps, its median z-score (distance from the step median in robust standard deviations)\n"
    "  exceeds --straggler-z (default 3) AND its median excess over the step median exceeds\n"
    "  --straggler-excess (default 0.05 = 5%): slow from the start, so it has no change point\n"
    "  of its own, and far outside its peers' spread. Steps logged by fewer than 3 workers are\n"
    "  not compared; with fewer than 3 workers at every step, change points are per worker.\n"
    "\n"
    "nccl: NCCL call sequences, format detected from the content; any input may be gzipped\n"
    "  (by content, whatever its name):\n"
    "  - a Peregrine NCCL ring file (binary, 'PEGRRING' magic): what libperegrine_nccl.so writes\n"
    "    per training process (PEREGRINE_NCCL_RING_DIR/peregrine-nccl-r<RANK>-p<PID>.ring, or\n"
    "    /dev/shm/peregrine-nccl-r<RANK>-p<PID>); copy it before its agent deletes it;\n"
    "  - JSON lines: {\"op\":\"AllReduce\",\"comm\":\"0x..\",\"count\":N,\"datatype\":7,\n"
    "    \"time_ns\":T[,\"rank\":R]} one call per line;\n"
    "  - NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs ('NCCL INFO AllReduce: opCount ... count N\n"
    "    datatype D ... comm 0x..'), one stream per host:pid and cudaDev, also behind a\n"
    "    launcher's line prefix: Ray '(RayTrainWorker pid=N, ip=A) ', torchrun '[rankN]:' or\n"
    "    '[defaultN]:' (local rank), Slurm srun --label 'N: ' ([rankN] and Slurm's N give the\n"
    "    rank); opCount resets and gaps are noted; unreadable call lines are skipped, counted;\n"
    "    iteration times need timestamps (NCCL >= 2.26: NCCL_DEBUG_TIMESTAMP_LEVELS=INFO\n"
    "    NCCL_DEBUG_TIMESTAMP_FORMAT='[%F %T.%6f] '); without them only the period and call\n"
    "    structure are reported;\n"
    "  - PyTorch profiler (Kineto) trace JSON: nccl:* CPU ops (their gpu_user_annotation copies\n"
    "    are not counted again), else ncclDevKernel_* kernels; count, dtype and process group\n"
    "    from record_param_comms or the kernels' args when the ops lack them; ProfilerStep#N\n"
    "    annotations give the iteration times when present.\n"
    "  It reports the period (calls per iteration, by autocorrelation of call signatures), one\n"
    "  period's calls, iteration-time statistics and change points (as for steps). --rank N\n"
    "  keeps one stream (streams of unknown rank are numbered 0, 1, ... in order).\n"
    "  Several FILEs, or a DIR of them (one per rank: logs, traces, rings), are compared across\n"
    "  ranks: per communicator (by size, or by name where the input names it), the calls are\n"
    "  aligned by opCount (PyTorch's Seq) where every call has one, else by position, and the\n"
    "  first call at which ranks disagree (op, count, datatype) is reported as a DESYNC with the\n"
    "  ranks on each side; ranks whose calls stop before their peers' are listed as behind.\n"
    "\n"
    "stacks: one stack dump per rank in DIR (py-spy dump, gdb 'thread apply all bt' or eu-stack).\n"
    "  The rank of a file: a line 'rank: N' among its first 5 lines; else 'rank' + optional\n"
    "  '-', '_' or '.' + digits in the file name (rank-3.txt, rank_3.log, gdb_rank3.txt); else\n"
    "  the last number in the file name (stack.3.txt). Several files of one rank are merged;\n"
    "  a rank without a file counts as '<no stack captured>'. Ranks with identical stacks are\n"
    "  grouped; the largest group is healthy, the others are suspects, and the smallest TP/PP/DP\n"
    "  group whose machines cover the suspects' machines is chosen for eviction (rank order:\n"
    "  TP fastest, then DP, then PP; machine m holds ranks m*G .. m*G+G-1). Each group's main\n"
    "  thread is classified (collective wait, data loading, queue/lock, idle, compute); when the\n"
    "  largest groups tie or nearly tie, groups idling (data loader, queue, lock, sleep, read)\n"
    "  while their TP/PP/DP peers wait in collectives are the suspects; an exact tie nothing\n"
    "  separates evicts nothing. The verdict says its confidence (high, medium, low) and why.\n"
    "  Bad lines (a truncated frame) and unreadable files are skipped with a warning, counted.\n"
    "\n"
    "fr: PyTorch NCCL flight recorder dumps in DIR, one per rank (TORCH_NCCL_TRACE_BUFFER_SIZE>0\n"
    "  writes <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>, a pickle of version 2.x; plain or gzip),\n"
    "  read without Python. The rank: --prefix P, the file name is P + rank; else the digits at\n"
    "  the end of the name. Per process group it prints the stuck collective (lowest seq id\n"
    "  unfinished on some rank and completed on none), the ranks waiting in it, the ranks that\n"
    "  never reached it, calls that differ at one seq id (operation, dtypes, sizes), unmatched\n"
    "  send/recv, each rank's last collective and a verdict. Unreadable files are listed with\n"
    "  their reason and the other ranks still analysed.\n"
    "\n"
    "--json prints one JSON object instead of text. Exit status: 0 ok, 1 bad input, 2 usage.\n";

// Every analysis reads its files here: gzip (by content) is inflated (input_file.h).
absl::StatusOr<std::string> ReadFile(const std::string& path) { return ReadAnalysisInput(path); }

std::string Pct(double x) { return absl::StrFormat("%+.1f%%", 100.0 * x); }

std::string Num(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1000) return absl::StrFormat("%.1f", v);
  if (a >= 1) return absl::StrFormat("%.4g", v);
  return absl::StrFormat("%.4g", v);
}

Json StatsJson(const SummaryStats& s) {
  return Json{{"count", s.count}, {"mean", s.mean},   {"median", s.median}, {"stddev", s.stddev},
              {"min", s.min},     {"p5", s.p5},       {"p95", s.p95},       {"max", s.max}};
}

Json ChangeJson(const ChangeAnalysis& c) {
  Json changes = Json::array();
  for (const StepChange& x : c.changes) {
    changes.push_back(Json{{"kind", FailSlowEventKindName(x.kind)},
                           {"step", x.step},
                           {"confirmedStep", x.confirmed_step},
                           {"posterior", x.posterior},
                           {"meanBefore", x.mean_before},
                           {"meanAfter", x.mean_after},
                           {"relativeChange", x.relative_change},
                           {"severity", x.severity}});
  }
  Json episodes = Json::array();
  for (const SlowdownEpisode& e : c.episodes) {
    episodes.push_back(Json{{"onsetStep", e.onset_step},
                            {"endStep", e.end_step ? Json(*e.end_step) : Json(nullptr)},
                            {"severity", e.severity}});
  }
  return Json{{"changePoints", changes},
              {"slowdowns", episodes},
              {"rejectedChangePoints", c.rejected_change_points}};
}

void PrintChanges(const std::string& who, const ChangeAnalysis& c, const std::string& unit,
                  std::ostream& out) {
  for (const StepChange& x : c.changes) {
    out << "  " << who << ": " << FailSlowEventKindName(x.kind) << " at step " << x.step
        << " (confirmed at step " << x.confirmed_step << "): " << Num(x.mean_before) << unit << " -> "
        << Num(x.mean_after) << unit << " (" << Pct(x.relative_change) << "), severity "
        << Pct(x.severity) << "\n";
  }
  for (const SlowdownEpisode& e : c.episodes) {
    out << "  " << who << ": SLOWDOWN from step " << e.onset_step << " to "
        << (e.end_step ? absl::StrCat("step ", *e.end_step) : std::string("the end (ongoing)"))
        << ", severity " << Pct(e.severity) << "\n";
  }
}

// Prints an input that could not be read or parsed; the exit code 1.
int InputError(const absl::Status& status, std::ostream& err) {
  err << "peregrinectl analyze: " << status.message() << "\n";
  return 1;
}

// Writes `report` on `source` with `json` under --json, else with `text`; the exit code 0.
template <typename Report>
int Render(const AnalyzeArgs& args, const Report& report, const std::string& source, std::ostream& out,
           void (*json)(const Report&, const std::string&, std::ostream&),
           void (*text)(const Report&, const std::string&, std::ostream&)) {
  (args.json ? json : text)(report, source, out);
  return 0;
}

// A non-empty text, stored in *target; else "--<flag>: needs a value".
FlagSetter TextFlag(std::string* target) {
  return [target](const std::string& flag, const std::string& value) -> std::optional<std::string> {
    if (value.empty()) return absl::StrCat("--", flag, ": needs a value");
    *target = value;
    return std::nullopt;
  };
}

int RunSteps(const AnalyzeArgs& args, std::ostream& out, std::ostream& err) {
  StepTableOptions table_options;
  StepsOptions options;
  bool strict = false;
  std::vector<std::pair<std::string, std::string>> units;
  for (const char* u : kStepTimeUnits) units.emplace_back(u, u);
  const FlagTable flags = {
      {"format", ChoiceFlag<StepTableFormat>(&table_options.format, {{"auto", StepTableFormat::kAuto},
                                                                     {"long", StepTableFormat::kLong},
                                                                     {"wide", StepTableFormat::kWide}})},
      {"worker-col", TextFlag(&table_options.worker_column)},
      {"step-col", TextFlag(&table_options.step_column)},
      {"time-col", TextFlag(&table_options.time_column)},
      {"unit", ChoiceFlag<std::string>(&table_options.unit, units)},
      {"strict", ChoiceFlag<bool>(&strict, {{"true", true}, {"false", false}})},
      {"verify", NumberFlag(&options.change.verify_threshold)},
      {"prob", NumberFlag(&options.change.report_threshold)},
      {"straggler-z", NumberFlag(&options.persistent_z)},
      {"straggler-excess", NumberFlag(&options.min_relative_excess)}};
  if (!ApplyAnalysisArgs(args, "steps", "FILE", flags, kUsage, err)) return 2;
  table_options.strict = strict;
  const std::string& path = args.operands[0];
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return InputError(text.status(), err);
  absl::StatusOr<StepTimesTable> table = ParseStepTimesCsv(*text, path, table_options);
  if (!table.ok()) return InputError(table.status(), err);
  // Seconds internally; the report in the unit that reads best, named in the output.
  if (const std::string unit = ReadableStepTimeUnit(*table); unit != table->unit) {
    ConvertStepTimes(*table, unit);
  }
  absl::StatusOr<StepsReport> report = AnalyzeStepTimes(*table, options);
  if (!report.ok()) {
    err << "peregrinectl analyze steps: " << report.status().message() << "\n";
    return 2;
  }
  if (!table->source_unit.empty() && table->source_unit != table->unit) {
    report->notes.insert(report->notes.begin(),
                         absl::StrCat("times converted from ", table->source_unit, " to ", table->unit));
  }
  report->notes.insert(report->notes.begin(), table->warnings.begin(), table->warnings.end());
  return Render(args, *report, path, out, RenderStepsJson, RenderStepsText);
}

// The files of `operands`: each a file, or a directory whose regular files (not hidden,
// in name order) are all taken.
absl::StatusOr<std::vector<std::string>> NcclInputFiles(const std::vector<std::string>& operands) {
  std::vector<std::string> files;
  for (const std::string& operand : operands) {
    std::error_code ec;
    if (!std::filesystem::is_directory(operand, ec)) {
      files.push_back(operand);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(operand, ec)) {
      const std::string name = entry.path().filename().string();
      std::error_code type_ec;
      if (!name.empty() && name[0] != '.' && entry.is_regular_file(type_ec)) found.push_back(entry.path().string());
    }
    if (ec) return absl::InvalidArgumentError(absl::StrCat(operand, ": cannot list: ", ec.message()));
    if (found.empty()) return absl::InvalidArgumentError(absl::StrCat(operand, ": no files in the directory"));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

absl::StatusOr<NcclTrace> ReadNcclInput(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  if (LooksLikeNcclRing(*text)) return ReadNcclRingFile(*text, path);
  if (absl::string_view(*text).substr(0, 4096).find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": binary data without the Peregrine ring magic \"PEGRRING\": not a Peregrine "
              "NCCL ring, NCCL_DEBUG log or Kineto trace"));
  }
  return ParseNcclTrace(*text, path);
}

int RunNccl(const AnalyzeArgs& args, std::ostream& out, std::ostream& err) {
  std::optional<int> rank;
  ChangeOptions options;
  const FlagTable flags = {{"rank", IntegerFlag(&rank, 0, "rank")},
                           {"verify", NumberFlag(&options.verify_threshold)},
                           {"prob", NumberFlag(&options.report_threshold)}};
  // One or more FILEs / DIRs: the flags are checked with the first operand alone.
  if (args.operands.empty()) {
    err << "peregrinectl analyze nccl: needs at least one FILE or DIR\n" << kUsage;
    return 2;
  }
  AnalyzeArgs first = args;
  first.operands.resize(1);
  if (!ApplyAnalysisArgs(first, "nccl", "FILE", flags, kUsage, err)) return 2;
  absl::StatusOr<std::vector<std::string>> files = NcclInputFiles(args.operands);
  if (!files.ok()) return InputError(files.status(), err);
  std::vector<NcclTrace> traces;
  for (const std::string& file : *files) {
    absl::StatusOr<NcclTrace> trace = ReadNcclInput(file);
    if (!trace.ok()) return InputError(trace.status(), err);
    traces.push_back(*std::move(trace));
  }
  const std::string source = files->size() == 1 ? files->front() : absl::StrJoin(args.operands, " ");
  NcclTrace trace = files->size() == 1 ? std::move(traces.front()) : MergeNcclTraces(std::move(traces), *files);
  if (trace.skipped_lines > 0) {
    err << "peregrinectl analyze nccl: warning: " << trace.skipped_lines
        << " unreadable line(s)/event(s) skipped (see the notes)\n";
  }
  absl::StatusOr<NcclReport> report = AnalyzeNcclTrace(trace, rank, options);
  if (!report.ok()) {
    err << "peregrinectl analyze nccl: " << source << ": " << report.status().message() << "\n";
    return report.status().code() == absl::StatusCode::kNotFound ? 1 : 2;
  }
  std::optional<NcclDesyncReport> desync;
  if (!rank && trace.streams.size() > 1) desync = FindNcclDesync(trace.streams);
  const NcclDesyncReport* d = desync ? &*desync : nullptr;
  if (args.json) {
    RenderNcclJson(*report, source, out, d);
  } else {
    RenderNcclText(*report, source, out, d);
  }
  return 0;
}

int RunStacks(const AnalyzeArgs& args, std::ostream& out, std::ostream& err) {
  std::map<std::string, int> sizes = {{"tp", 0}, {"pp", 0}, {"dp", 0}, {"gpus-per-machine", 0}};
  StackAggregationOptions options;
  FlagTable flags = {{"threads", ChoiceFlag<ThreadSelection>(&options.threads, {{"all", ThreadSelection::kAllThreads},
                                                                               {"main", ThreadSelection::kMainThread}})}};
  for (auto& [flag, size] : sizes) flags[flag] = IntegerFlag(&size, 1, "positive integer");
  if (!ApplyAnalysisArgs(args, "stacks", "DIR", flags, kUsage, err)) return 2;
  for (const auto& [flag, v] : sizes) {
    if (v == 0) {
      err << "peregrinectl analyze stacks: --" << flag << " is required\n" << kUsage;
      return 2;
    }
  }
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(sizes["tp"], sizes["pp"], sizes["dp"], sizes["gpus-per-machine"]);
  if (!layout.ok()) {
    err << "peregrinectl analyze stacks: " << layout.status().message() << "\n";
    return 2;
  }
  const std::string& dir = args.operands[0];
  absl::StatusOr<StackDirectory> input = LoadStackDirectory(dir);
  if (!input.ok()) return InputError(input.status(), err);
  for (const std::string& w : input->warnings) err << "peregrinectl analyze stacks: warning: " << w << "\n";
  absl::StatusOr<StacksReport> report = AnalyzeStacks(*layout, input->files, options);
  if (!report.ok()) return InputError(report.status(), err);
  (args.json ? RenderStacksJson : RenderStacksText)(*report, dir, out, &*input);
  return 0;
}

}  // namespace

void RenderStepsText(const StepsReport& r, const std::string& source, std::ostream& out) {
  const std::string unit = r.unit.empty() ? "" : absl::StrCat(" ", r.unit);
  out << source << ": " << StepTableFormatName(r.format) << " format, " << r.workers.size()
      << " workers" << (r.unit.empty() ? ", times in the file's unit" : absl::StrCat(", times in ", r.unit))
      << "\n";
  out << absl::StrFormat(
      "peer rule: each step is compared across the workers that logged it (median and 1.4826 x MAD, "
      "%d workers or more: %d of %d steps); persistently slow = median z > %.2f and median excess over "
      "the step median > %s; a change all workers share is job-wide\n\n",
      r.min_workers, r.steps_compared, r.steps_total, r.persistent_z, Pct(r.min_relative_excess));
  size_t width = 6;
  for (const WorkerAnalysis& w : r.workers) width = std::max(width, w.worker.size());
  out << absl::StrFormat("%-*s  %-13s  %10s  %10s  %10s  %10s  %7s  %6s  %s\n", static_cast<int>(width),
                         "WORKER", "STEPS", "MEDIAN", "MEAN", "P95", "MAX", "xPEERS", "Z", "STATUS");
  for (const WorkerAnalysis& w : r.workers) {
    std::vector<std::string> status;
    if (w.persistently_slow) status.push_back("PERSISTENTLY SLOW");
    if (!w.change.episodes.empty()) status.push_back("SLOWDOWN");
    if (status.empty()) status.push_back("ok");
    out << absl::StrFormat("%-*s  %-13s  %10s  %10s  %10s  %10s  %7.3f  %6s  %s\n", static_cast<int>(width),
                           w.worker,
                           absl::StrCat(w.first_step, "-", w.last_step, " (", w.stats.count, ")").substr(0, 13),
                           Num(w.stats.median), Num(w.stats.mean), Num(w.stats.p95), Num(w.stats.max),
                           w.ratio_to_peers,
                           w.steps_compared > 0 ? absl::StrFormat("%.1f", w.peer_z) : std::string("-"),
                           absl::StrJoin(status, ", "));
  }
  out << "\njob-wide changes (the per-step median; shared by the workers, not stragglers):\n";
  if (r.job_wide.changes.empty()) {
    out << "  none\n";
  } else {
    PrintChanges("job", r.job_wide, unit, out);
  }
  out << "\nverified change points relative to the peers (time / step median):\n";
  bool any = false;
  for (const WorkerAnalysis& w : r.workers) {
    if (w.change.changes.empty()) continue;
    any = true;
    PrintChanges(absl::StrCat(w.worker, w.changes_relative_to_peers ? "" : " (own times)"), w.change,
                 w.changes_relative_to_peers ? "" : unit, out);
  }
  if (!any) out << "  none\n";
  out << "\nsummary: "
      << (r.persistently_slow.empty() ? std::string("no persistently slow worker")
                                      : absl::StrCat("persistently slow: ", absl::StrJoin(r.persistently_slow, ", ")))
      << "; "
      << (r.with_slowdowns.empty() ? std::string("no slowdown")
                                   : absl::StrCat("slowdowns: ", absl::StrJoin(r.with_slowdowns, ", ")))
      << "; "
      << (r.job_wide.changes.empty() ? std::string("no job-wide change")
                                     : absl::StrCat(r.job_wide.changes.size(), " job-wide change(s)"))
      << "\n";
  for (const std::string& n : r.notes) out << "note: " << n << "\n";
}

void RenderStepsJson(const StepsReport& r, const std::string& source, std::ostream& out) {
  Json workers = Json::array();
  for (const WorkerAnalysis& w : r.workers) {
    workers.push_back(Json{{"worker", w.worker},
                           {"firstStep", w.first_step},
                           {"lastStep", w.last_step},
                           {"stats", StatsJson(w.stats)},
                           {"stepsComparedToPeers", w.steps_compared},
                           {"ratioToPeers", w.ratio_to_peers},
                           {"peerZ", w.peer_z},
                           {"persistentlySlow", w.persistently_slow},
                           {"changesRelativeToPeers", w.changes_relative_to_peers},
                           {"changes", ChangeJson(w.change)}});
  }
  Json j{{"command", "steps"},
         {"source", source},
         {"format", StepTableFormatName(r.format)},
         {"unit", r.unit},
         {"peerRule", Json{{"minWorkers", r.min_workers},
                           {"persistentZ", r.persistent_z},
                           {"minRelativeExcess", r.min_relative_excess},
                           {"minRelativeScale", r.min_relative_scale},
                           {"stepsTotal", r.steps_total},
                           {"stepsCompared", r.steps_compared}}},
         {"medianOfMedians", r.median_of_medians},
         {"jobWide", ChangeJson(r.job_wide)},
         {"workers", workers},
         {"persistentlySlow", r.persistently_slow},
         {"withSlowdowns", r.with_slowdowns},
         {"notes", r.notes}};
  out << j.dump(2) << "\n";
}

void RenderNcclText(const NcclReport& r, const std::string& source, std::ostream& out,
                    const NcclDesyncReport* desync) {
  out << source << ": " << NcclTraceFormatName(r.format) << ", " << r.streams.size() << " stream(s)\n";
  for (const std::string& n : r.notes) out << "note: " << n << "\n";
  for (const NcclStreamAnalysis& s : r.streams) {
    out << "\n== " << s.label << ": " << s.calls << " NCCL calls, " << s.distinct_signatures
        << " distinct call signatures\n";
    if (s.period > 0) {
      out << absl::StrFormat("period: %d calls per iteration (ACF %.3f)", s.period, s.period_acf);
      if (s.pattern_changes > 0) out << ", pattern changed " << s.pattern_changes << " time(s)";
      out << "\n";
      constexpr size_t kShown = 16;
      for (size_t i = 0; i < s.pattern.size() && i < kShown; ++i) {
        out << absl::StrFormat("  %3d  %s\n", i, s.pattern[i]);
      }
      if (s.pattern.size() > kShown) out << "  ... (" << s.pattern.size() - kShown << " more)\n";
    } else {
      out << "period: none found\n";
    }
    if (!s.iteration_ms.empty()) {
      out << "iteration times (" << s.iteration_source << "): " << s.stats.count << " iterations, median "
          << Num(s.stats.median) << " ms, mean " << Num(s.stats.mean) << " ms, p5 " << Num(s.stats.p5)
          << " ms, p95 " << Num(s.stats.p95) << " ms, min " << Num(s.stats.min) << " ms, max "
          << Num(s.stats.max) << " ms\n";
      if (s.calls_per_profiler_step > 0) {
        out << "NCCL calls per ProfilerStep: " << Num(s.calls_per_profiler_step) << " (median)\n";
      }
      out << "verified change points:\n";
      if (s.change.changes.empty()) out << "  none\n";
      PrintChanges("iteration time", s.change, " ms", out);
    } else {
      out << "iteration times: not available\n";
    }
    for (const std::string& n : s.notes) out << "note: " << n << "\n";
  }
  if (desync == nullptr) return;
  out << "\n== cross-rank comparison: "
      << (desync->classes.empty() ? std::string("no communicator shared by two streams")
                                  : desync->any_desync ? std::string("DESYNC") : std::string("consistent"))
      << "\n";
  for (const NcclDesyncClass& c : desync->classes) {
    out << c.group << " (" << c.streams.size() << " streams, aligned by " << c.aligned_by << ", "
        << c.compared_calls << " calls compared): ";
    if (!c.desync) {
      out << "all agree\n";
    } else {
      out << "DESYNC at " << (c.aligned_by == "opCount" ? absl::StrFormat("opCount 0x%x", c.position)
                                                       : absl::StrCat("call #", c.position))
          << "\n";
      for (const NcclDesyncSide& side : c.sides) {
        out << "  " << side.call << ": " << absl::StrJoin(side.streams, ", ") << "\n";
      }
    }
    for (const NcclBehindStream& b : c.behind) {
      const bool hex = c.aligned_by == "opCount";
      out << "  behind: " << b.stream << " stops at " << c.aligned_by << " "
          << (hex ? absl::StrFormat("0x%x", b.last_position) : absl::StrCat("#", b.last_position))
          << ", peers reach " << (hex ? absl::StrFormat("0x%x", b.peers_last) : absl::StrCat("#", b.peers_last))
          << "\n";
    }
  }
}

void RenderNcclJson(const NcclReport& r, const std::string& source, std::ostream& out,
                    const NcclDesyncReport* desync) {
  Json streams = Json::array();
  for (const NcclStreamAnalysis& s : r.streams) {
    streams.push_back(Json{{"label", s.label},
                           {"rank", s.rank >= 0 ? Json(s.rank) : Json(nullptr)},
                           {"calls", s.calls},
                           {"distinctSignatures", s.distinct_signatures},
                           {"period", s.period},
                           {"periodAcf", s.period_acf},
                           {"patternChanges", s.pattern_changes},
                           {"pattern", s.pattern},
                           {"iterationSource", s.iteration_source},
                           {"iterationSteps", s.iteration_steps},
                           {"iterationMs", s.iteration_ms},
                           {"callsPerProfilerStep", s.calls_per_profiler_step},
                           {"stats", StatsJson(s.stats)},
                           {"changes", ChangeJson(s.change)},
                           {"notes", s.notes}});
  }
  Json j{{"command", "nccl"},
         {"source", source},
         {"format", NcclTraceFormatName(r.format)},
         {"streams", streams},
         {"notes", r.notes}};
  if (desync != nullptr) {
    Json classes = Json::array();
    for (const NcclDesyncClass& c : desync->classes) {
      Json sides = Json::array();
      for (const NcclDesyncSide& side : c.sides) {
        sides.push_back(Json{{"call", side.call}, {"streams", side.streams}, {"ranks", side.ranks}});
      }
      Json behind = Json::array();
      for (const NcclBehindStream& b : c.behind) {
        behind.push_back(Json{{"stream", b.stream},
                              {"rank", b.rank >= 0 ? Json(b.rank) : Json(nullptr)},
                              {"lastPosition", b.last_position},
                              {"peersLast", b.peers_last}});
      }
      classes.push_back(Json{{"group", c.group},
                             {"streams", c.streams},
                             {"alignedBy", c.aligned_by},
                             {"comparedCalls", c.compared_calls},
                             {"desync", c.desync},
                             {"position", c.desync ? Json(c.position) : Json(nullptr)},
                             {"sides", sides},
                             {"behind", behind}});
    }
    j["desync"] = Json{{"found", desync->any_desync}, {"classes", classes}};
  }
  out << j.dump(2) << "\n";
}

void RenderStacksText(const StacksReport& r, const std::string& dir, std::ostream& out, const StackDirectory* input) {
  out << dir << ": " << r.files.size() << " stack file(s), layout " << r.layout << "\n";
  if (input != nullptr && (input->skipped_files > 0 || input->skipped_lines > 0)) {
    out << "skipped: " << input->skipped_files << " unreadable file(s), " << input->skipped_lines
        << " bad line(s) in the files kept (warnings on stderr)\n";
  }
  for (const StackFileSummary& f : r.files) {
    out << absl::StrFormat("  rank %-5d %-9s %d process(es), %d thread(s)  %s  [rank from %s]\n", f.rank,
                           f.tool, f.processes, f.threads, f.path, f.rank_rule);
  }
  if (!r.missing_ranks.empty()) {
    out << "ranks without a stack file: " << RankRanges(r.missing_ranks) << "\n";
  }
  const StackAggregation& a = r.aggregation;
  out << "\n" << a.groups.size() << " stack group(s), largest first:\n";
  for (size_t i = 0; i < a.groups.size(); ++i) {
    const StackGroup& g = a.groups[i];
    const bool suspect = std::find(a.suspect_groups.begin(), a.suspect_groups.end(), static_cast<int>(i)) !=
                         a.suspect_groups.end();
    out << absl::StrFormat("  group %d%s: %d rank(s) [%s] on machine(s) [%s], %s%s\n", i,
                           static_cast<int>(i) == a.dominant_group ? " (dominant: healthy)"
                           : suspect                               ? " (suspect)"
                                                                   : "",
                           g.ranks.size(), RankRanges(g.ranks), RankRanges(r.machines_of_groups[i]), FrameKindName(g.kind),
                           g.kind_frame.empty() ? "" : absl::StrCat(" in ", g.kind_frame));
    out << "      " << g.summary << "\n";
    if (!g.distinguishing_frames.empty()) {
      out << "      only here: " << absl::StrJoin(g.distinguishing_frames, " <- ") << "\n";
    }
  }
  out << "\nsuspect ranks: " << (a.suspect_ranks.empty() ? std::string("none") : RankRanges(a.suspect_ranks)) << "\n";
  if (a.chosen_group) {
    out << "chosen group: " << GroupKindName(a.chosen_group->kind) << " group " << a.chosen_group->index
        << " (ranks " << RankRanges(a.chosen_group->ranks) << ")\n";
  } else {
    out << "chosen group: none\n";
  }
  out << "machines to evict: "
      << (a.machines_to_evict.empty() ? std::string("none") : RankRanges(a.machines_to_evict)) << "\n";
  out << "confidence: " << VerdictConfidenceName(a.confidence) << " (" << a.confidence_reason << ")\n";
  out << "explanation: " << a.explanation << "\n";
}

void RenderStacksJson(const StacksReport& r, const std::string& dir, std::ostream& out, const StackDirectory* input) {
  Json files = Json::array();
  for (const StackFileSummary& f : r.files) {
    files.push_back(Json{{"path", f.path},
                         {"rank", f.rank},
                         {"rankFrom", f.rank_rule},
                         {"tool", f.tool},
                         {"processes", f.processes},
                         {"threads", f.threads}});
  }
  const StackAggregation& a = r.aggregation;
  Json groups = Json::array();
  for (size_t i = 0; i < a.groups.size(); ++i) {
    groups.push_back(Json{{"ranks", a.groups[i].ranks},
                          {"machines", r.machines_of_groups[i]},
                          {"dominant", static_cast<int>(i) == a.dominant_group},
                          {"suspect", std::find(a.suspect_groups.begin(), a.suspect_groups.end(),
                                                static_cast<int>(i)) != a.suspect_groups.end()},
                          {"kind", FrameKindName(a.groups[i].kind)},
                          {"kindFrame", a.groups[i].kind_frame},
                          {"distinguishingFrames", a.groups[i].distinguishing_frames},
                          {"summary", a.groups[i].summary},
                          {"signature", a.groups[i].signature}});
  }
  Json chosen = nullptr;
  if (a.chosen_group) {
    chosen = Json{{"kind", GroupKindName(a.chosen_group->kind)},
                  {"index", a.chosen_group->index},
                  {"ranks", a.chosen_group->ranks}};
  }
  Json j{{"command", "stacks"},
         {"dir", dir},
         {"layout", r.layout},
         {"worldSize", r.world_size},
         {"files", files},
         {"missingRanks", r.missing_ranks},
         {"groups", groups},
         {"dominantGroup", a.dominant_group},
         {"suspectRanks", a.suspect_ranks},
         {"chosenGroup", chosen},
         {"machinesToEvict", a.machines_to_evict},
         {"confidence", VerdictConfidenceName(a.confidence)},
         {"confidenceReason", a.confidence_reason},
         {"skippedFiles", input != nullptr ? input->skipped_files : 0},
         {"skippedLines", input != nullptr ? input->skipped_lines : 0},
         {"warnings", input != nullptr ? input->warnings : std::vector<std::string>{}},
         {"explanation", a.explanation}};
  out << j.dump(2) << "\n";
}

int RunAnalyze(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // --strict (steps) takes no value: as --strict=true it cannot take the next word as one.
  std::vector<std::string> words = args;
  for (std::string& w : words) {
    if (w == "--strict") w = "--strict=true";
  }
  AnalyzeArgs p;
  if (auto e = ParseAnalyzeArgs(words, &p)) {
    err << "peregrinectl analyze: " << *e << "\n" << kUsage;
    return 2;
  }
  if (p.help || p.command == "help") {
    out << kUsage;
    return 0;
  }
  if (p.command == "steps") return RunSteps(p, out, err);
  if (p.command == "nccl") return RunNccl(p, out, err);
  if (p.command == "stacks") return RunStacks(p, out, err);
  if (p.command == "fr") return RunFlightRecorderAnalysis(p, kUsage, out, err);
  err << "peregrinectl analyze: "
      << (p.command.empty() ? std::string("missing what to analyze (steps, nccl, stacks or fr)")
                            : absl::StrCat("unknown analysis '", p.command, "' (steps, nccl, stacks or fr)"))
      << "\n"
      << kUsage;
  return 2;
}

}  // namespace peregrine
