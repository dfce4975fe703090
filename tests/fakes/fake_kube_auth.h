// FakeKubeAuth: the API server's TokenReview (authentication.k8s.io/v1) and
// SubjectAccessReview (authorization.k8s.io/v1) for FakeKubeApiServer, with the tokens
// and RBAC-like rules a test configures. It follows the documented semantics:
//   TokenReview: spec.token is required (400 BadRequest without it). An unknown token
//     answers status.authenticated=false with status.error. spec.audiences empty means
//     the API server's own audience (kApiServerAudience); the token is authenticated
//     only when its audiences (default: the API server's) intersect the wanted ones, and
//     status.audiences is that intersection. status.user carries username, uid, groups
//     and extra.
//   Bound service-account tokens (AddBoundServiceAccountToken): a projected token of a
//     pod's service account is the user "system:serviceaccount:<namespace>:<name>" in
//     the groups system:serviceaccounts, system:serviceaccounts:<namespace> and
//     system:authenticated, with user.extra "authentication.kubernetes.io/pod-name" and
//     "authentication.kubernetes.io/pod-uid" naming the pod it was issued to, and valid
//     only for the audiences it was requested with. The API server stops
//     authenticating it once the pod is gone: RevokeToken models that.
//   SubjectAccessReview: exactly one of spec.resourceAttributes and
//     spec.nonResourceAttributes (422 Invalid otherwise); spec.user or spec.groups is
//     required (422). Evaluated like RBAC: a rule grants its verbs on its API groups and
//     resources to its users and groups, within its namespace (a RoleBinding) or in
//     every namespace (namespace "": a ClusterRoleBinding); a rule with resourceNames
//     matches only requests naming one of them (never a list); "*" matches any verb,
//     group or resource. A deny rule that matches answers allowed=false, denied=true (a
//     webhook authorizer's explicit deny); otherwise a grant answers allowed=true with a
//     reason; no match answers allowed=false with no opinion (denied absent).
// Who calls the review APIs is not checked (the controller's own service account).
//
// Thread-safe: every method may be called from any thread.
#ifndef PEREGRINE_TESTS_FAKES_FAKE_KUBE_AUTH_H_
#define PEREGRINE_TESTS_FAKES_FAKE_KUBE_AUTH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace peregrine::testing {

inline constexpr char kApiServerAudience[] = "https://kubernetes.default.svc.cluster.local";

// Who a token belongs to.
struct FakeTokenIdentity {
  std::string username;
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
  std::vector<std::string> audiences;  // the token's audiences; empty = {kApiServerAudience}
};

// One RBAC-like rule (a Role's rule bound to subjects).
struct FakeAccessRule {
  std::vector<std::string> users;   // subjects: usernames
  std::vector<std::string> groups;  // subjects: groups
  std::vector<std::string> verbs;
  std::vector<std::string> api_groups;      // "" is the core group
  std::vector<std::string> resources;       // "trainingjobs", "pods/log"
  std::string namespace_name;               // "" = every namespace (cluster-wide binding)
  std::vector<std::string> resource_names;  // empty = any object
  bool deny = false;                        // an explicit deny (webhook authorizers)
};

class FakeKubeAuth {
 public:
  void AddToken(std::string token, FakeTokenIdentity identity) ABSL_LOCKS_EXCLUDED(mu_);
  // A projected service-account token bound to pod `pod_name` (uid `pod_uid`) of
  // `namespace_name`, issued for `audiences`.
  void AddBoundServiceAccountToken(std::string token, const std::string& namespace_name,
                                   const std::string& service_account, const std::string& pod_name,
                                   const std::string& pod_uid, std::vector<std::string> audiences)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The token is no longer authenticated (its pod was deleted).
  void RevokeToken(const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  void AddRule(FakeAccessRule rule) ABSL_LOCKS_EXCLUDED(mu_);

  // A review's HTTP answer: code and body (the review with its status, or a Status).
  struct Answer {
    int code = 201;
    nlohmann::json body;
  };
  // The POST body of a TokenReview / SubjectAccessReview create.
  Answer ReviewToken(const nlohmann::json& request) const ABSL_LOCKS_EXCLUDED(mu_);
  Answer ReviewAccess(const nlohmann::json& request) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, FakeTokenIdentity> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<FakeAccessRule> rules_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_FAKES_FAKE_KUBE_AUTH_H_
