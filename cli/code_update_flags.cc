#include "cli/code_update_flags.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace peregrine {

using nlohmann::json;

absl::StatusOr<CodeUpdateRequest> CodeUpdateFromFlags(const std::map<std::string, std::string>& flags) {
  CodeUpdateRequest r;
  for (const auto& [flag, value] : flags) {
    if (flag == "revision") {
      r.revision = value;
    } else if (flag == "image") {
      r.image = value;
    } else if (flag == "command") {
      std::vector<std::string> argv = absl::StrSplit(value, ' ', absl::SkipWhitespace());
      r.command = std::move(argv);
    } else if (flag == "command-json") {
      const json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (!j.is_array() || !std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_string(); })) {
        return absl::InvalidArgumentError("--command-json: expected a JSON list of strings");
      }
      r.command = j.get<std::vector<std::string>>();
    } else if (flag == "urgent") {
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--urgent: expected true or false, got ", value));
      }
      r.urgent = value == "true";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", flag, " for update"));
    }
  }
  if (flags.count("command") && flags.count("command-json")) {
    return absl::InvalidArgumentError("give --command or --command-json, not both");
  }
  // The controller's own check of the request.
  absl::StatusOr<CodeUpdateRequest> checked = ParseCodeUpdateRequest(CodeUpdateRequestToJson(r));
  if (!checked.ok()) return checked.status();
  return r;
}

json CodeUpdateMergePatch(const CodeUpdateRequest& request, bool has_hot_update_annotation) {
  json code = {{"revision", request.revision}};
  if (request.image) code["image"] = *request.image;
  if (request.command) code["command"] = *request.command;  // a merge patch replaces a list whole
  json patch = {{"spec", {{"codeVersion", code}}}};
  if (request.urgent) {
    patch["metadata"]["annotations"][kHotUpdateAnnotationName] = "urgent";
  } else if (has_hot_update_annotation) {
    patch["metadata"]["annotations"][kHotUpdateAnnotationName] = nullptr;
  }
  return patch;
}

}  // namespace peregrine
