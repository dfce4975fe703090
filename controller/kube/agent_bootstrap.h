// The Kubernetes bootstrap of an agent's identity (docs/security.md). Each training pod
// gets a projected service-account token for the audience peregrine.dev, seen only by
// its agent; the agent presents it on its first registration, and the controller checks
// it with a TokenReview (authentication.k8s.io/v1, spec.audiences [peregrine.dev]). The
// token is the pod's when all of these hold:
//   - status.authenticated, and status.audiences holds peregrine.dev;
//   - the user is a service account of the job's namespace
//     (username "system:serviceaccount:<namespace>:<name>");
//   - user.extra["authentication.kubernetes.io/pod-name"] is the claimed pod, and
//     user.extra["authentication.kubernetes.io/pod-uid"] is the uid of the pod of that
//     name in the pod informer's cache, whose ownerReferences hold the job's uid (so a
//     pod someone else made with the job's label does not pass).
// The agent then gets its credential in the RegisterAck (controller/agent_credentials.h)
// and never presents the bootstrap token again.
//
// TokenReview verdicts (the reviewed user, or a refusal) are cached by the token's
// SHA-256 for `cache_ttl`, at most `cache_entries` of them (the oldest go first), so a
// reconnect storm is not one review per stream; the pod checks run every time, against
// the informer's cache. Failures to reach the API server are not cached.
//
// Thread-safe. Errors: kUnauthenticated naming the failed check (never the token);
// kUnavailable when the review could not be made.
#ifndef PEREGRINE_CONTROLLER_KUBE_AGENT_BOOTSTRAP_H_
#define PEREGRINE_CONTROLLER_KUBE_AGENT_BOOTSTRAP_H_

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_credentials.h"
#include "controller/api_auth.h"

namespace peregrine::kube {

class Informer;

// The audience of the agents' projected service-account tokens.
inline constexpr char kAgentTokenAudience[] = "peregrine.dev";
inline constexpr char kPodNameExtra[] = "authentication.kubernetes.io/pod-name";
inline constexpr char kPodUidExtra[] = "authentication.kubernetes.io/pod-uid";

// What the check needs of the pod object: its uid and its owners' uids.
struct BootstrapPod {
  std::string uid;
  std::vector<std::string> owner_uids;
};
BootstrapPod BootstrapPodFromObject(const nlohmann::json& pod);

// Pure: OK when `user` (a TokenReview's answer for kAgentTokenAudience) is the token of
// pod `identity.pod` of the job `identity` names; `pod` is that pod as the informer holds
// it (nullopt: not there). kUnauthenticated naming the check that failed.
absl::Status CheckBootstrapUser(const ApiUser& user, const AgentIdentity& identity,
                                const std::optional<BootstrapPod>& pod);

struct AgentBootstrapOptions {
  absl::Duration cache_ttl = absl::Seconds(60);
  size_t cache_entries = 4096;
};

class KubeAgentBootstrapVerifier final : public AgentBootstrapVerifier {
 public:
  // A TokenReview for kAgentTokenAudience: the user, kUnauthenticated, or kUnavailable.
  using Review = std::function<absl::StatusOr<ApiUser>(const std::string& token)>;
  // The pod namespace/name in the cache, or nullopt.
  using PodLookup = std::function<std::optional<BootstrapPod>(const std::string& ns, const std::string& name)>;

  // `clock` must outlive the verifier.
  KubeAgentBootstrapVerifier(Review review, PodLookup pods, Clock* clock, AgentBootstrapOptions options = {});

  absl::Status Verify(const AgentIdentity& identity, const std::string& token) override;

  // TokenReviews made so far (cache misses).
  int ReviewsForTest() const;
  size_t CachedForTest() const;

 private:
  struct Verdict {
    absl::StatusOr<ApiUser> user;
    absl::Time expires;
  };
  absl::StatusOr<ApiUser> Reviewed(const std::string& token);

  const Review review_;
  const PodLookup pods_;
  Clock* const clock_;
  const AgentBootstrapOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Verdict> cache_ ABSL_GUARDED_BY(mu_);  // by the token's SHA-256
  int reviews_ ABSL_GUARDED_BY(mu_) = 0;
};

// A PodLookup over the pod informer (which must outlive it).
KubeAgentBootstrapVerifier::PodLookup PodLookupFromInformer(Informer* pods);

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_AGENT_BOOTSTRAP_H_
