#include "proto/api/code_update_request.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace peregrine {

absl::StatusOr<CodeUpdateRequest> ParseCodeUpdateRequest(std::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("code update: the body is not a JSON object");
  CodeUpdateRequest r;
  for (const auto& [key, value] : j.items()) {
    if (key == "revision") {
      if (!value.is_string()) return absl::InvalidArgumentError("code update: revision: expected a string");
      r.revision = value.get<std::string>();
    } else if (key == "image") {
      if (!value.is_string()) return absl::InvalidArgumentError("code update: image: expected a string");
      r.image = value.get<std::string>();
    } else if (key == "command") {
      if (!value.is_array()) return absl::InvalidArgumentError("code update: command: expected a list of strings");
      std::vector<std::string> command;
      for (const auto& arg : value) {
        if (!arg.is_string()) return absl::InvalidArgumentError("code update: command: expected a list of strings");
        command.push_back(arg.get<std::string>());
      }
      if (command.empty() || command[0].empty()) {
        return absl::InvalidArgumentError("code update: command: must name a program (argv[0])");
      }
      r.command = std::move(command);
    } else if (key == "urgent") {
      if (!value.is_boolean()) return absl::InvalidArgumentError("code update: urgent: expected true or false");
      r.urgent = value.get<bool>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("code update: unknown field '", key, "' (expected revision, image, command, urgent)"));
    }
  }
  if (r.revision.empty()) return absl::InvalidArgumentError("code update: revision: required");
  return r;
}

std::string CodeUpdateRequestToJson(const CodeUpdateRequest& request) {
  nlohmann::json j = {{"revision", request.revision}, {"urgent", request.urgent}};
  if (request.image) j["image"] = *request.image;
  if (request.command) j["command"] = *request.command;
  return j.dump();
}

}  // namespace peregrine
