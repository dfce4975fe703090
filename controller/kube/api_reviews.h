// The Kubernetes side of the HTTP API's authentication and authorisation
// (controller/api_auth.h): TokenReview (authentication.k8s.io/v1) and
// SubjectAccessReview (authorization.k8s.io/v1) bodies and the reading of their answers
// (pure functions), and KubeApiAuthorizer, which posts them with the controller's
// RestClient (the controller's service account needs create on both).
//
// Semantics followed (the Kubernetes API reference):
//   TokenReview: spec.token, spec.audiences (empty = the API server's own audiences).
//     The token is valid only when status.authenticated is true; status.error says why
//     not. When audiences were asked for, status.audiences (the token's audiences that
//     matched) must include at least one of them, else the token is refused (a token
//     issued for another audience). status.user gives username, uid, groups and extra.
//   SubjectAccessReview: spec.resourceAttributes plus user, groups, uid and extra as the
//     TokenReview returned them. Only status.allowed == true allows; status.denied is an
//     explicit deny and allowed == false without it means "no opinion", which refuses
//     too. status.reason and status.evaluationError explain.
// No answer is cached: every request is reviewed (two API calls for a write, one plus
// one per namespace for a list).
//
// Errors: Interpret* return kUnauthenticated (token refused, message without the token)
// or kInvalidArgument (an answer that is not a review). KubeApiAuthorizer maps transport
// and API errors to kUnavailable, naming the review. Thread-safe.
#ifndef PEREGRINE_CONTROLLER_KUBE_API_REVIEWS_H_
#define PEREGRINE_CONTROLLER_KUBE_API_REVIEWS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "controller/api_auth.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {

ResourcePath TokenReviewsPath();
ResourcePath SubjectAccessReviewsPath();

nlohmann::json TokenReviewRequest(const std::string& token, const std::vector<std::string>& audiences);
// The caller behind a TokenReview answer to a request for `audiences`.
absl::StatusOr<ApiUser> InterpretTokenReview(const nlohmann::json& review,
                                             const std::vector<std::string>& audiences);

nlohmann::json SubjectAccessReviewRequest(const ApiUser& user, const ResourceAccess& access);
absl::StatusOr<AccessDecision> InterpretSubjectAccessReview(const nlohmann::json& review);

class KubeApiAuthorizer final : public ApiAuthorizer {
 public:
  // `client` must outlive the authorizer. `audiences`: the TokenReview's spec.audiences.
  KubeApiAuthorizer(RestClient* client, std::vector<std::string> audiences)
      : client_(client), audiences_(std::move(audiences)) {}
  absl::StatusOr<ApiUser> Authenticate(const std::string& token) override;
  absl::StatusOr<AccessDecision> Authorize(const ApiUser& user, const ResourceAccess& access) override;

 private:
  RestClient* const client_;
  const std::vector<std::string> audiences_;
};

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_API_REVIEWS_H_
