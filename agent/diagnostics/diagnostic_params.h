// Typed reading of a RunDiagnostic's string params.
//
// Every diagnostic param is a string on the wire; DiagnosticParams reads one as an integer,
// a number or a string with a default, and returns InvalidArgument naming the kind and the
// param ("all_gather: param machines: expected an integer in [1, 100000], got \"x\"") when
// it is malformed, missing (required ones) or out of range. Unknown params are ignored
// (forward compatible).
//
// Pure. Thread-compatible.
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_PARAMS_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_PARAMS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace peregrine {

using DiagnosticParamMap = std::map<std::string, std::string>;

class DiagnosticParams {
 public:
  DiagnosticParams(std::string kind, DiagnosticParamMap params)
      : kind_(std::move(kind)), params_(std::move(params)) {}

  bool Has(const std::string& name) const { return params_.count(name) > 0; }

  // An integer in [lo, hi]; `fallback` when absent; InvalidArgument when malformed or out of range.
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  // As Int, but absent is InvalidArgument ("param NAME is required").
  absl::StatusOr<int64_t> RequiredInt(const std::string& name, int64_t lo, int64_t hi) const;
  // A finite number in [lo, hi]; nullopt when absent.
  absl::StatusOr<std::optional<double>> OptionalDouble(const std::string& name, double lo, double hi) const;
  // The string or `fallback` when absent.
  std::string String(const std::string& name, const std::string& fallback = "") const;
  // A non-empty string; InvalidArgument when absent or empty.
  absl::StatusOr<std::string> RequiredString(const std::string& name) const;
  // InvalidArgument "<kind>: param <name>: <what>".
  absl::Status Invalid(const std::string& name, const std::string& what) const;

  const std::string& kind() const { return kind_; }
  const DiagnosticParamMap& map() const { return params_; }

 private:
  std::string kind_;
  DiagnosticParamMap params_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_PARAMS_H_
