// `peregrinectl update`'s flags as a CodeUpdateRequest (proto/api/code_update_request.h),
// and that request as the JSON merge patch of a TrainingJob that the controller's own
// update does (controller/kube: spec.codeVersion gets the given fields, the annotation
// peregrine.dev/hot-update is "urgent" or removed), for the Kubernetes backend.
//
// Pure; thread-safe.
#ifndef PEREGRINE_CLI_CODE_UPDATE_FLAGS_H_
#define PEREGRINE_CLI_CODE_UPDATE_FLAGS_H_

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "proto/api/code_update_request.h"

namespace peregrine {

inline constexpr char kHotUpdateAnnotationName[] = "peregrine.dev/hot-update";

// --revision R [--image I] [--command 'ARGV'] [--command-json '[...]'] [--urgent[=true|false]].
// kInvalidArgument naming the flag: an unknown flag, both command forms, a command-json
// that is not a list of strings, an --urgent that is not true/false, or a request the
// controller would refuse (no revision, an empty command).
absl::StatusOr<CodeUpdateRequest> CodeUpdateFromFlags(const std::map<std::string, std::string>& flags);

// {"spec": {"codeVersion": {revision, [image], [command]}}, and for an urgent update
// {"metadata": {"annotations": {hot-update: "urgent"}}}, for a lazy one a null that
// removes the annotation when `has_hot_update_annotation` (the job carries it now).
nlohmann::json CodeUpdateMergePatch(const CodeUpdateRequest& request, bool has_hot_update_annotation);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_CODE_UPDATE_FLAGS_H_
