#include "agent/microbatch_plan_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"

namespace peregrine {

std::string MicroBatchPlanPathFor(const std::string& log_dir, const std::string& pod_name) {
  if (!log_dir.empty()) return absl::StrCat(log_dir, "/microbatch-plan");
  return absl::StrCat("/tmp/peregrine-microbatch-", pod_name, "/microbatch-plan");
}

absl::Status WriteMicroBatchPlan(const std::string& path, const MicroBatchPlan& plan) {
  if (plan.empty()) return ClearMicroBatchPlan(path);
  if (absl::Status valid = ValidateMicroBatchPlan(plan); !valid.ok()) return valid;
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::InternalError(absl::StrCat("micro-batch plan: create ", parent.string(), ": ", ec.message()));
  return WriteFileDurably(path, FormatMicroBatchPlan(plan), 0644);
}

absl::Status ClearMicroBatchPlan(const std::string& path) {
  if (std::remove(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("micro-batch plan: remove ", path, ": ", std::strerror(errno)));
}

}  // namespace peregrine
