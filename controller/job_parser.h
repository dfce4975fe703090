// Parsing and validation of TrainingJob manifests.
//
// One parser serves both drivers: a local job file (YAML) and the object the Kubernetes
// API server returns (JSON, which is YAML). Unknown fields under spec are rejected so a
// typo never silently falls back to a default. Every error names the field path and the
// reason, e.g. "spec.parallelism.tensor: expected an integer, got 'two'".
//
// Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_JOB_PARSER_H_
#define PEREGRINE_CONTROLLER_JOB_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"

namespace peregrine {

// The longest TrainingJob name: a pod's hostname is its name, a DNS label of at most 63
// characters, and the longest pod name is "<job>-m<slot>-<serial>" with a slot below
// 100000 (5 digits) and a replacement serial of up to 7 digits: 63 - 15 = 48. The name is
// also the headless Service's, so it must start with a letter (DNS-1035). The CRD has
// the same rule.
inline constexpr int kMaxJobNameLength = 48;

// Parses one TrainingJob document. On success the job is also valid (ValidateTrainingJob).
// kInvalidArgument names the field and the reason on any error.
absl::StatusOr<TrainingJob> ParseTrainingJob(std::string_view text);

// A byte count written as a Kubernetes quantity ("8Gi", "500Mi", "1G", "1.5Gi", "1e9",
// "1073741824"). kInvalidArgument saying what is wrong (a negative number, an unknown
// suffix, a fraction of a byte, 2^63 or more).
absl::StatusOr<uint64_t> ParseByteQuantity(std::string_view text);

// Reads and parses a file; kNotFound if it cannot be read.
absl::StatusOr<TrainingJob> LoadTrainingJobFile(const std::string& path);

// Semantic checks the schema cannot express alone (and the ones it does, so the local
// path is as strict as the API server): sizes, the parallelism product, standby bounds,
// thresholds. kInvalidArgument naming the field on failure.
absl::Status ValidateTrainingJob(const TrainingJob& job);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_JOB_PARSER_H_
