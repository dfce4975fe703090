#include "agent/diagnostics/dcgm_diag_json.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace peregrine {
namespace {

using nlohmann::json;

std::vector<int> GpusOf(const json& result) {
  std::vector<int> gpus;
  auto add = [&gpus](const json& v) {
    if (v.is_number_integer()) {
      gpus.push_back(v.get<int>());
    } else if (v.is_string()) {
      for (absl::string_view part : absl::StrSplit(v.get<std::string>(), ',', absl::SkipWhitespace())) {
        int g = 0;
        if (absl::SimpleAtoi(part, &g)) gpus.push_back(g);
      }
    }
  };
  for (const char* key : {"gpu_ids", "gpu_id"}) {
    if (!result.contains(key)) continue;
    const json& v = result[key];
    if (v.is_array()) {
      for (const json& x : v) add(x);
    } else {
      add(v);
    }
  }
  if (result.contains("entity_id") &&
      (!result.contains("entity_group") || (result["entity_group"].is_string() &&
                                            absl::AsciiStrToUpper(result["entity_group"].get<std::string>()) == "GPU"))) {
    add(result["entity_id"]);
  }
  return gpus;
}

std::string FirstWarning(const json& result) {
  if (!result.contains("warnings") || !result["warnings"].is_array()) return "";
  for (const json& w : result["warnings"]) {
    if (w.is_string()) return w.get<std::string>();
    if (w.is_object() && w.contains("warning") && w["warning"].is_string()) return w["warning"].get<std::string>();
  }
  return "";
}

bool IsFail(const json& status) {
  return status.is_string() && absl::AsciiStrToLower(status.get<std::string>()) == "fail";
}

}  // namespace

std::set<int> DcgmDiagReport::FailedGpus() const {
  std::set<int> gpus;
  for (const DcgmDiagFailure& f : failures) {
    if (f.gpu >= 0) gpus.insert(f.gpu);
  }
  return gpus;
}

absl::StatusOr<DcgmDiagReport> ParseDcgmDiagJson(const std::string& text) {
  const size_t brace = text.find('{');
  if (brace == std::string::npos) return absl::InvalidArgumentError("dcgmi diag output has no JSON object");
  json doc = json::parse(text.begin() + static_cast<std::ptrdiff_t>(brace), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("dcgmi diag output is not valid JSON");
  }
  const json* root = nullptr;
  for (const char* key : {"DCGM GPU Diagnostic", "DCGM Diagnostic"}) {
    if (doc.contains(key) && doc[key].is_object()) root = &doc[key];
  }
  DcgmDiagReport report;
  if (root == nullptr) {
    if (doc.contains("runtime_error") && doc["runtime_error"].is_string()) {
      report.runtime_error = doc["runtime_error"].get<std::string>();
      return report;
    }
    return absl::InvalidArgumentError("dcgmi diag JSON has no \"DCGM GPU Diagnostic\" or \"DCGM Diagnostic\" object");
  }
  if (root->contains("runtime_error") && (*root)["runtime_error"].is_string()) {
    report.runtime_error = (*root)["runtime_error"].get<std::string>();
  }
  if (!root->contains("test_categories") || !(*root)["test_categories"].is_array()) {
    if (!report.runtime_error.empty()) return report;
    return absl::InvalidArgumentError("dcgmi diag JSON has no test_categories array");
  }
  for (const json& category : (*root)["test_categories"]) {
    if (!category.is_object() || !category.contains("tests") || !category["tests"].is_array()) continue;
    for (const json& test : category["tests"]) {
      if (!test.is_object()) continue;
      ++report.tests;
      const std::string name = test.contains("name") && test["name"].is_string() ? test["name"].get<std::string>()
                                                                                    : "unnamed test";
      bool any_result_failed = false;
      if (test.contains("results") && test["results"].is_array()) {
        for (const json& result : test["results"]) {
          if (!result.is_object() || !result.contains("status") || !IsFail(result["status"])) continue;
          any_result_failed = true;
          std::vector<int> gpus = GpusOf(result);
          if (gpus.empty()) gpus.push_back(-1);
          for (int gpu : gpus) report.failures.push_back(DcgmDiagFailure{name, gpu, FirstWarning(result)});
        }
      }
      if (!any_result_failed && test.contains("test_summary") && test["test_summary"].is_object() &&
          test["test_summary"].contains("status") && IsFail(test["test_summary"]["status"])) {
        report.failures.push_back(DcgmDiagFailure{name, -1, FirstWarning(test["test_summary"])});
      }
    }
  }
  return report;
}

}  // namespace peregrine
