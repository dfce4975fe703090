#include "agent/diagnostics/diagnostic_params.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace peregrine {

absl::Status DiagnosticParams::Invalid(const std::string& name, const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(kind_, ": param ", name, ": ", what));
}

absl::StatusOr<int64_t> DiagnosticParams::Int(const std::string& name, int64_t fallback, int64_t lo,
                                              int64_t hi) const {
  auto it = params_.find(name);
  if (it == params_.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return Invalid(name, absl::StrCat("expected an integer in [", lo, ", ", hi, "], got \"", it->second, "\""));
  }
  return v;
}

absl::StatusOr<int64_t> DiagnosticParams::RequiredInt(const std::string& name, int64_t lo, int64_t hi) const {
  if (!Has(name)) return absl::InvalidArgumentError(absl::StrCat(kind_, ": param ", name, " is required"));
  return Int(name, 0, lo, hi);
}

absl::StatusOr<std::optional<double>> DiagnosticParams::OptionalDouble(const std::string& name, double lo,
                                                                       double hi) const {
  auto it = params_.find(name);
  if (it == params_.end()) return std::optional<double>();
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v) || !std::isfinite(v) || v < lo || v > hi) {
    return Invalid(name, absl::StrCat("expected a number in [", lo, ", ", hi, "], got \"", it->second, "\""));
  }
  return std::optional<double>(v);
}

std::string DiagnosticParams::String(const std::string& name, const std::string& fallback) const {
  auto it = params_.find(name);
  return it == params_.end() ? fallback : it->second;
}

absl::StatusOr<std::string> DiagnosticParams::RequiredString(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end() || it->second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kind_, ": param ", name, " is required"));
  }
  return it->second;
}

}  // namespace peregrine
