// CodeUpdateRequest: the body of POST /api/v1/jobs/{namespace}/{name}/code, a hot code
// update as `peregrinectl update` sends it:
//   {"revision": "r2", "image": "...", "command": ["python", "train.py"], "urgent": true}
// revision is required; image and command are optional and keep the job's current
// values when absent. Part of the HTTP API's wire contract, shared by the controller
// (which applies it: controller/code_update.h) and peregrinectl.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_PROTO_API_CODE_UPDATE_REQUEST_H_
#define PEREGRINE_PROTO_API_CODE_UPDATE_REQUEST_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

struct CodeUpdateRequest {
  std::string revision;                              // required, non-empty
  std::optional<std::string> image;                  // absent: keep
  std::optional<std::vector<std::string>> command;   // absent: keep; present: non-empty
  bool urgent = false;
};

// Parses the JSON body. kInvalidArgument naming the field on any error (unknown
// fields included).
absl::StatusOr<CodeUpdateRequest> ParseCodeUpdateRequest(std::string_view json_text);
std::string CodeUpdateRequestToJson(const CodeUpdateRequest& request);

}  // namespace peregrine

#endif  // PEREGRINE_PROTO_API_CODE_UPDATE_REQUEST_H_
