#include "node_inspector/node_reporter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

const kube::ResourcePath& Nodes() {
  static const kube::ResourcePath* path = new kube::ResourcePath{"", "v1", "nodes", ""};
  return *path;
}

}  // namespace

NodeReporter::NodeReporter(kube::RestClient* client, NodeReporterOptions options)
    : client_(client), options_(std::move(options)) {}

absl::Status NodeReporter::Report(const std::vector<NodeConditionReport>& reports, absl::Time now) {
  absl::Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    absl::StatusOr<nlohmann::json> node = client_->Get(Nodes(), options_.node);
    if (!node.ok()) return node.status();
    const nlohmann::json* status = node->contains("status") ? &(*node)["status"] : nullptr;
    const nlohmann::json current =
        status != nullptr && status->is_object() && status->contains("conditions") ? (*status)["conditions"]
                                                                                   : nlohmann::json();
    MergedConditions merged = MergeConditions(current, CheckGpuVisibility(reports, *node), now, options_.heartbeat);
    if (!merged.changed) return absl::OkStatus();
    nlohmann::json patch = {
        {"metadata", {{"resourceVersion", (*node)["metadata"].value("resourceVersion", "")}}},
        {"status", {{"conditions", std::move(merged.conditions)}}}};
    absl::StatusOr<nlohmann::json> written = client_->MergePatch(Nodes(), options_.node, patch, "status");
    if (written.ok()) {
      ++writes_;
      return absl::OkStatus();
    }
    if (!kube::IsConflict(written.status())) return written.status();
    last = written.status();
  }
  return absl::AbortedError(absl::StrCat("node ", options_.node, ": conditions still conflicting after ",
                                         options_.max_attempts, " attempts: ", last.message()));
}

}  // namespace peregrine
