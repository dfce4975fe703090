#include "tests/fakes/fake_kube_auth.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine::testing {

using nlohmann::json;

namespace {

FakeKubeAuth::Answer StatusAnswer(int code, const std::string& reason, const std::string& message) {
  return {code, {{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object()}, {"status", "Failure"},
                 {"message", message}, {"reason", reason}, {"code", code}}};
}

std::string StringAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<std::string> StringsAt(const json& j, const char* key) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const json& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

bool Has(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

bool MatchesOrStar(const std::vector<std::string>& list, const std::string& v) {
  return Has(list, "*") || Has(list, v);
}

// The review echoed back as the server stores it: the request plus metadata and status.
json Echo(const json& request, const char* api_version, const char* kind) {
  json out = request;
  out["apiVersion"] = api_version;
  out["kind"] = kind;
  out["metadata"] = {{"creationTimestamp", nullptr}};
  return out;
}

}  // namespace

void FakeKubeAuth::AddToken(std::string token, FakeTokenIdentity identity) {
  absl::MutexLock lock(&mu_);
  tokens_[std::move(token)] = std::move(identity);
}

void FakeKubeAuth::AddBoundServiceAccountToken(std::string token, const std::string& namespace_name,
                                               const std::string& service_account, const std::string& pod_name,
                                               const std::string& pod_uid, std::vector<std::string> audiences) {
  FakeTokenIdentity id;
  id.username = absl::StrCat("system:serviceaccount:", namespace_name, ":", service_account);
  id.uid = absl::StrCat("sa-uid-", namespace_name, "-", service_account);
  id.groups = {"system:serviceaccounts", absl::StrCat("system:serviceaccounts:", namespace_name),
               "system:authenticated"};
  id.extra["authentication.kubernetes.io/pod-name"] = {pod_name};
  id.extra["authentication.kubernetes.io/pod-uid"] = {pod_uid};
  id.audiences = std::move(audiences);
  AddToken(std::move(token), std::move(id));
}

void FakeKubeAuth::RevokeToken(const std::string& token) {
  absl::MutexLock lock(&mu_);
  tokens_.erase(token);
}

void FakeKubeAuth::AddRule(FakeAccessRule rule) {
  absl::MutexLock lock(&mu_);
  rules_.push_back(std::move(rule));
}

FakeKubeAuth::Answer FakeKubeAuth::ReviewToken(const json& request) const {
  if (!request.is_object() || StringAt(request, "kind") != "TokenReview") {
    return StatusAnswer(400, "BadRequest", "the request body is not a TokenReview");
  }
  const json spec = request.value("spec", json::object());
  const std::string token = spec.is_object() ? StringAt(spec, "token") : "";
  if (token.empty()) return StatusAnswer(400, "BadRequest", "token is required for TokenReview in authentication");
  std::vector<std::string> wanted = StringsAt(spec, "audiences");
  if (wanted.empty()) wanted = {kApiServerAudience};
  json out = Echo(request, "authentication.k8s.io/v1", "TokenReview");
  json status = {{"authenticated", false}, {"user", json::object()}};
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) {
    status["error"] = "[invalid bearer token, token lookup failed]";
  } else {
    const FakeTokenIdentity& id = it->second;
    const std::vector<std::string> has =
        id.audiences.empty() ? std::vector<std::string>{kApiServerAudience} : id.audiences;
    std::vector<std::string> common;
    for (const std::string& a : wanted) {
      if (Has(has, a)) common.push_back(a);
    }
    if (common.empty()) {
      status["error"] = absl::StrCat("[invalid bearer token, token audiences [", absl::StrJoin(has, " "),
                                     "] is invalid for the target audiences [", absl::StrJoin(wanted, " "), "]]");
    } else {
      status["authenticated"] = true;
      json user = {{"username", id.username}};
      if (!id.uid.empty()) user["uid"] = id.uid;
      if (!id.groups.empty()) user["groups"] = id.groups;
      if (!id.extra.empty()) user["extra"] = id.extra;
      status["user"] = user;
      status["audiences"] = common;
    }
  }
  out["status"] = status;
  return {201, out};
}

FakeKubeAuth::Answer FakeKubeAuth::ReviewAccess(const json& request) const {
  if (!request.is_object() || StringAt(request, "kind") != "SubjectAccessReview") {
    return StatusAnswer(400, "BadRequest", "the request body is not a SubjectAccessReview");
  }
  const json spec = request.value("spec", json::object());
  const bool has_resource = spec.is_object() && spec.contains("resourceAttributes");
  const bool has_non_resource = spec.is_object() && spec.contains("nonResourceAttributes");
  if (has_resource == has_non_resource) {
    return StatusAnswer(422, "Invalid",
                        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: "
                        "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes "
                        "must be specified");
  }
  const std::string user = StringAt(spec, "user");
  const std::vector<std::string> groups = StringsAt(spec, "groups");
  if (user.empty() && groups.empty()) {
    return StatusAnswer(422, "Invalid",
                        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: "
                        "\"\": at least one of user or group must be specified");
  }
  json out = Echo(request, "authorization.k8s.io/v1", "SubjectAccessReview");
  json status = {{"allowed", false}};
  if (has_resource) {
    const json& attrs = spec["resourceAttributes"];
    const std::string verb = StringAt(attrs, "verb"), group = StringAt(attrs, "group"),
                      ns = StringAt(attrs, "namespace"), name = StringAt(attrs, "name"),
                      subresource = StringAt(attrs, "subresource");
    const std::string resource =
        subresource.empty() ? StringAt(attrs, "resource") : absl::StrCat(StringAt(attrs, "resource"), "/", subresource);
    absl::MutexLock lock(&mu_);
    const FakeAccessRule* grant = nullptr;
    const FakeAccessRule* deny = nullptr;
    for (const FakeAccessRule& r : rules_) {
      const bool subject =
          (!user.empty() && Has(r.users, user)) ||
          std::any_of(groups.begin(), groups.end(), [&](const std::string& g) { return Has(r.groups, g); });
      const bool matches = subject && MatchesOrStar(r.verbs, verb) && MatchesOrStar(r.api_groups, group) &&
                           MatchesOrStar(r.resources, resource) &&
                           (r.namespace_name.empty() || r.namespace_name == ns) &&
                           (r.resource_names.empty() || (!name.empty() && Has(r.resource_names, name)));
      if (!matches) continue;
      if (r.deny && deny == nullptr) deny = &r;
      if (!r.deny && grant == nullptr) grant = &r;
    }
    if (deny != nullptr) {
      status["denied"] = true;
      status["reason"] = absl::StrCat("denied by policy for user \"", user, "\"");
    } else if (grant != nullptr) {
      status["allowed"] = true;
      status["reason"] = absl::StrCat("RBAC: allowed by ",
                                      grant->namespace_name.empty() ? "ClusterRoleBinding" : "RoleBinding",
                                      " for user \"", user, "\"");
    }
  }
  out["status"] = status;
  return {201, out};
}

}  // namespace peregrine::testing
