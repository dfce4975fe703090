// Small file helpers for the inspections (sysfs, procfs). Not a public API of the
// library beyond its own .cc files; kept in a header so each inspection shares them.
#ifndef PEREGRINE_AGENT_INSPECTION_SYSFS_READ_H_
#define PEREGRINE_AGENT_INSPECTION_SYSFS_READ_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine::inspection_internal {

// The whole file (bounded to 1 MiB). kNotFound when absent, kUnavailable otherwise.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);
// Names in a directory, sorted, without "." and "..". kNotFound when absent.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);
bool PathExists(const std::string& path);

}  // namespace peregrine::inspection_internal

#endif  // PEREGRINE_AGENT_INSPECTION_SYSFS_READ_H_
