#include "controller/kube/api_reviews.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/kube/json_fields.h"

namespace peregrine::kube {

using nlohmann::json;

ResourcePath TokenReviewsPath() { return {"authentication.k8s.io", "v1", "tokenreviews", ""}; }
ResourcePath SubjectAccessReviewsPath() { return {"authorization.k8s.io", "v1", "subjectaccessreviews", ""}; }

json TokenReviewRequest(const std::string& token, const std::vector<std::string>& audiences) {
  json spec = {{"token", token}};
  if (!audiences.empty()) spec["audiences"] = audiences;
  return {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", spec}};
}

namespace {

std::vector<std::string> Strings(const json* j) {
  std::vector<std::string> out;
  if (j == nullptr || !j->is_array()) return out;
  for (const json& v : *j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

absl::StatusOr<ApiUser> InterpretTokenReview(const json& review, const std::vector<std::string>& audiences) {
  const json* status = Path(review, {"status"});
  if (status == nullptr || !status->is_object()) {
    return absl::InvalidArgumentError("TokenReview answer has no status");
  }
  const json* authenticated = Path(*status, {"authenticated"});
  const std::string error = Str(*status, "error");
  if (authenticated == nullptr || !authenticated->is_boolean() || !authenticated->get<bool>()) {
    return absl::UnauthenticatedError(
        error.empty() ? "the token was not authenticated" : absl::StrCat("the token was not authenticated: ", error));
  }
  if (!audiences.empty()) {
    // The answer's audiences are those of the token that matched the request's.
    const std::vector<std::string> got = Strings(Path(*status, {"audiences"}));
    const bool match = std::any_of(got.begin(), got.end(), [&](const std::string& a) {
      return std::find(audiences.begin(), audiences.end(), a) != audiences.end();
    });
    if (!match) {
      return absl::UnauthenticatedError(
          absl::StrCat("the token is not valid for audience ", absl::StrJoin(audiences, ", ")));
    }
  }
  const json* user = Path(*status, {"user"});
  if (user == nullptr || !user->is_object() || Str(*user, "username").empty()) {
    return absl::UnauthenticatedError("the TokenReview named no user");
  }
  ApiUser out;
  out.username = Str(*user, "username");
  out.uid = Str(*user, "uid");
  out.groups = Strings(Path(*user, {"groups"}));
  if (const json* extra = Path(*user, {"extra"}); extra != nullptr && extra->is_object()) {
    for (const auto& [key, values] : extra->items()) out.extra[key] = Strings(&values);
  }
  return out;
}

json SubjectAccessReviewRequest(const ApiUser& user, const ResourceAccess& access) {
  json attrs = {{"verb", access.verb}, {"group", access.group}, {"resource", access.resource}};
  if (!access.namespace_name.empty()) attrs["namespace"] = access.namespace_name;
  if (!access.name.empty()) attrs["name"] = access.name;
  json spec = {{"resourceAttributes", attrs}, {"user", user.username}};
  if (!user.uid.empty()) spec["uid"] = user.uid;
  if (!user.groups.empty()) spec["groups"] = user.groups;
  if (!user.extra.empty()) spec["extra"] = user.extra;
  return {{"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}};
}

absl::StatusOr<AccessDecision> InterpretSubjectAccessReview(const json& review) {
  const json* status = Path(review, {"status"});
  if (status == nullptr || !status->is_object()) {
    return absl::InvalidArgumentError("SubjectAccessReview answer has no status");
  }
  const json* allowed = Path(*status, {"allowed"});
  const json* denied = Path(*status, {"denied"});
  AccessDecision d;
  // Only an explicit allowed=true allows; denied=true (explicit deny) always refuses.
  d.allowed = allowed != nullptr && allowed->is_boolean() && allowed->get<bool>() &&
              !(denied != nullptr && denied->is_boolean() && denied->get<bool>());
  d.reason = Str(*status, "reason");
  const std::string eval = Str(*status, "evaluationError");
  if (!eval.empty()) d.reason = d.reason.empty() ? eval : absl::StrCat(d.reason, " (", eval, ")");
  if (!d.allowed && d.reason.empty()) d.reason = "no RBAC rule allows it";
  return d;
}

absl::StatusOr<ApiUser> KubeApiAuthorizer::Authenticate(const std::string& token) {
  auto answer = client_->Create(TokenReviewsPath(), TokenReviewRequest(token, audiences_));
  if (!answer.ok()) {
    // The client's message names the path, never the body (which holds the token).
    return absl::UnavailableError(absl::StrCat("TokenReview failed: ", answer.status().message()));
  }
  return InterpretTokenReview(*answer, audiences_);
}

absl::StatusOr<AccessDecision> KubeApiAuthorizer::Authorize(const ApiUser& user, const ResourceAccess& access) {
  auto answer = client_->Create(SubjectAccessReviewsPath(), SubjectAccessReviewRequest(user, access));
  if (!answer.ok()) {
    return absl::UnavailableError(absl::StrCat("SubjectAccessReview failed: ", answer.status().message()));
  }
  auto decision = InterpretSubjectAccessReview(*answer);
  if (!decision.ok()) return absl::UnavailableError(decision.status().message());
  return decision;
}

}  // namespace peregrine::kube
