// Authentication and authorisation of the controller's HTTP API (Kubernetes mode).
//
// The pure part: which Kubernetes access a request needs (RequiredAccess), reading the
// bearer token out of an Authorization header (BearerToken), and the HTTP answer for a
// refused request (RefusalMessage). The I/O part is the ApiAuthorizer interface, which
// kube mode implements with TokenReview and SubjectAccessReview
// (controller/kube/api_reviews.h); local mode has none and keeps serving without
// credentials on its loopback address.
//
// Every API request maps to a SubjectAccessReview on the TrainingJob resource
// (group peregrine.dev, resource trainingjobs):
//   GET  /api/v1/jobs                  verb list, namespace "" first (all namespaces), else
//                                      per namespace; jobs of other namespaces are left out
//   GET  /api/v1/jobs/{ns}/{name}      verb get,    namespace ns, name name
//   POST /api/v1/jobs/{ns}/{name}/code verb update, namespace ns, name name
//   POST /api/v1/jobs/{ns}/{name}/faults  verb update (the same right as a code update)
//
// Thread safety: the functions are pure; ApiAuthorizer implementations are thread-safe.
#ifndef PEREGRINE_CONTROLLER_API_AUTH_H_
#define PEREGRINE_CONTROLLER_API_AUTH_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

inline constexpr char kTrainingJobGroup[] = "peregrine.dev";
inline constexpr char kTrainingJobResource[] = "trainingjobs";

// The API's routes that need a decision.
enum class ApiRoute { kListJobs, kGetJob, kUpdateCode, kInjectFault };

// A Kubernetes resource access: verb on group/resource in namespace (""= all
// namespaces), on the object `name` ("" = the collection).
struct ResourceAccess {
  std::string verb;
  std::string group = kTrainingJobGroup;
  std::string resource = kTrainingJobResource;
  std::string namespace_name;
  std::string name;

  bool operator==(const ResourceAccess&) const = default;
};

// Who called: the TokenReview's status.user.
struct ApiUser {
  std::string username;
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
};

// The access `route` needs for the job ns/name (ignored for kListJobs, which needs
// list in namespace `ns`, "" meaning all namespaces).
ResourceAccess RequiredAccess(ApiRoute route, absl::string_view ns, absl::string_view name);

// The token of an "Authorization: Bearer <token>" header value. The scheme is
// case-insensitive (RFC 7235); nullopt when the header is empty, another scheme, or the
// token is empty or contains whitespace.
std::optional<std::string> BearerToken(absl::string_view authorization);

// "user U may not VERB trainingjobs.peregrine.dev NAME in namespace NS: REASON" (the
// 403 body; it names what was refused and never carries a token).
std::string RefusalMessage(const ApiUser& user, const ResourceAccess& access, absl::string_view reason);

// A SubjectAccessReview's answer.
struct AccessDecision {
  bool allowed = false;
  std::string reason;  // status.reason, plus status.evaluationError when set
};

class ApiAuthorizer {
 public:
  virtual ~ApiAuthorizer() = default;
  // Who holds `token`. kUnauthenticated (the message says why, without the token) when
  // the token is not valid; kUnavailable when the API server could not answer.
  virtual absl::StatusOr<ApiUser> Authenticate(const std::string& token) = 0;
  // Whether `user` may do `access`. kUnavailable when the API server could not answer.
  virtual absl::StatusOr<AccessDecision> Authorize(const ApiUser& user, const ResourceAccess& access) = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_API_AUTH_H_
