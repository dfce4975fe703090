// `peregrinectl analyze`: offline analysis of users' own data, with the same algorithms the
// agent and controller run online.
//   analyze steps FILE [--format auto|long|wide] [--verify 0.1] [--prob 0.9] [--json]
//   analyze nccl FILE [--rank N] [--verify 0.1] [--prob 0.9] [--json]
//   analyze stacks DIR --tp T --pp P --dp D --gpus-per-machine G [--threads all|main] [--json]
// kUsage (printed by `analyze --help`) documents the input formats and the rules.
//
// RunAnalyze reads the named files (the only I/O here besides writing `out` / `err`),
// parses them (step_times.h, nccl_trace.h, stack_files.h), builds the report
// (analyze_report.h) and renders it as text, or JSON with --json. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_ANALYZE_COMMAND_H_
#define PEREGRINE_CLI_ANALYZE_ANALYZE_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "cli/analyze/analyze_report.h"
#include "cli/analyze/nccl_desync.h"
#include "cli/analyze/stack_files.h"

namespace peregrine {

// `args` are the words after "analyze" ({"steps", "times.csv", "--json"}). Returns the
// exit code: 0 the report was written to `out`; 1 the input could not be read or parsed
// (the message on `err` names the file, line and problem); 2 usage error.
int RunAnalyze(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Renderers (exposed for tests and other front ends). JSON is one object, pretty-printed.
void RenderStepsText(const StepsReport& report, const std::string& source, std::ostream& out);
void RenderStepsJson(const StepsReport& report, const std::string& source, std::ostream& out);
// With `desync` (several ranks given), the cross-rank comparison follows the streams.
void RenderNcclText(const NcclReport& report, const std::string& source, std::ostream& out,
                    const NcclDesyncReport* desync = nullptr);
void RenderNcclJson(const NcclReport& report, const std::string& source, std::ostream& out,
                    const NcclDesyncReport* desync = nullptr);
// `input` (optional): the skipped files and lines of the directory, reported with the verdict.
void RenderStacksText(const StacksReport& report, const std::string& dir, std::ostream& out,
                      const StackDirectory* input = nullptr);
void RenderStacksJson(const StacksReport& report, const std::string& dir, std::ostream& out,
                      const StackDirectory* input = nullptr);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_ANALYZE_COMMAND_H_
