// Parser of `dcgmi diag -r <level> -j` output (DCGM 2.x/3.x "DCGM GPU Diagnostic" and DCGM
// 4.x "DCGM Diagnostic" documents).
//
// Both shapes hold test_categories[].tests[] with a name and results[]; a result carries a
// status ("Pass", "Fail", "Warn", "Skip", ...) and the GPU it concerns: "gpu_ids" (a string
// "0" or "0,1", a number or an array) in 2.x/3.x, or "entity_group": "GPU" + "entity_id" in
// 4.x. A test without per-GPU results may carry "test_summary": {"status": ...}. A document
// with "runtime_error" is a failed run. Text before the first '{' (dcgmi banners) is skipped.
//
// Pure. Thread-safe.
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DCGM_DIAG_JSON_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DCGM_DIAG_JSON_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

struct DcgmDiagFailure {
  std::string test;
  int gpu = -1;  // -1: the test failed without naming a GPU
  std::string warning;
};

struct DcgmDiagReport {
  int tests = 0;  // tests seen
  std::vector<DcgmDiagFailure> failures;
  std::string runtime_error;
  bool passed() const { return failures.empty() && runtime_error.empty(); }
  std::set<int> FailedGpus() const;
};

// InvalidArgument when the text is not JSON or not a diag document (no test_categories).
absl::StatusOr<DcgmDiagReport> ParseDcgmDiagJson(const std::string& text);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DCGM_DIAG_JSON_H_
