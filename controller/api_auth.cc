#include "controller/api_auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace peregrine {

ResourceAccess RequiredAccess(ApiRoute route, absl::string_view ns, absl::string_view name) {
  ResourceAccess a;
  a.namespace_name = std::string(ns);
  switch (route) {
    case ApiRoute::kListJobs:
      a.verb = "list";
      return a;  // a collection: no name
    case ApiRoute::kGetJob:
      a.verb = "get";
      break;
    case ApiRoute::kUpdateCode:
    case ApiRoute::kInjectFault:
      // Both change what runs in the job's pods: the right to update the TrainingJob.
      a.verb = "update";
      break;
  }
  a.name = std::string(name);
  return a;
}

std::optional<std::string> BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme) ||
      !absl::ascii_isspace(static_cast<unsigned char>(authorization[kScheme.size()]))) {
    return std::nullopt;
  }
  absl::string_view token = absl::StripLeadingAsciiWhitespace(authorization.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  for (char c : token) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::string(token);
}

std::string RefusalMessage(const ApiUser& user, const ResourceAccess& access, absl::string_view reason) {
  std::string what = absl::StrCat(access.resource, ".", access.group);
  if (!access.name.empty()) absl::StrAppend(&what, " ", access.name);
  std::string where = access.namespace_name.empty() ? "in any namespace"
                                                     : absl::StrCat("in namespace ", access.namespace_name);
  std::string out = absl::StrCat("user \"", user.username, "\" may not ", access.verb, " ", what, " ", where);
  if (!reason.empty()) absl::StrAppend(&out, ": ", reason);
  return out;
}

}  // namespace peregrine
