// `peregrinectl analyze fr DIR [--prefix P] [--json]`: reads every PyTorch flight recorder
// dump in DIR (one file per rank, plain or gzip), analyses them (fr_analysis.h) and prints
// the report. The I/O of the analysis lives here; the decisions are in fr_analysis.
//
// The rank of a file: with --prefix P, the file name must be P followed by the rank
// (PyTorch writes <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>); without it, the digits at the
// end of the name (after dropping a .gz, .pkl or .pickle suffix). A file that cannot be
// read, has no rank, repeats a rank or is not a 2.x dump is listed with its reason and
// the other ranks are still analysed. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_FR_COMMAND_H_
#define PEREGRINE_CLI_ANALYZE_FR_COMMAND_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/analyze/analysis_args.h"
#include "cli/analyze/fr_analysis.h"

namespace peregrine {

// The rank in a dump's file name (see above); nullopt when there is none.
std::optional<int> FrRankFromFileName(absl::string_view name, absl::string_view prefix);

struct FrSkippedFile {
  std::string path, reason;
};

struct FrDirectory {
  std::vector<FrRankDump> dumps;  // by rank
  std::vector<FrSkippedFile> skipped;
};

// Reads DIR. kNotFound / kInvalidArgument when DIR is not a readable directory; a bad file
// only lands in `skipped`.
absl::StatusOr<FrDirectory> LoadFlightRecorderDirectory(const std::string& dir, absl::string_view prefix);

void RenderFrText(const FrDirectory& files, const FrReport& report, const std::string& dir, std::ostream& out);
void RenderFrJson(const FrDirectory& files, const FrReport& report, const std::string& dir, std::ostream& out);

// The `fr` analysis of RunAnalyze: exit code 0 report written, 1 no dump could be read
// (each file's reason on `err`), 2 usage (`usage` is printed).
int RunFlightRecorderAnalysis(const AnalyzeArgs& args, absl::string_view usage, std::ostream& out,
                              std::ostream& err);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_FR_COMMAND_H_
