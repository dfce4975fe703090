#include "controller/kube/agent_bootstrap.h"

#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "controller/kube/informer.h"
#include "controller/kube/json_fields.h"

namespace peregrine::kube {

using nlohmann::json;

namespace {

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

// The one value of an extra key ("" when absent or not exactly one).
std::string OneExtra(const ApiUser& user, const char* key) {
  auto it = user.extra.find(key);
  if (it == user.extra.end() || it->second.size() != 1) return "";
  return it->second[0];
}

}  // namespace

BootstrapPod BootstrapPodFromObject(const json& pod) {
  BootstrapPod out;
  if (const json* uid = Path(pod, {"metadata", "uid"}); uid != nullptr && uid->is_string()) {
    out.uid = uid->get<std::string>();
  }
  if (const json* owners = Path(pod, {"metadata", "ownerReferences"}); owners != nullptr && owners->is_array()) {
    for (const json& o : *owners) {
      if (o.is_object() && !Str(o, "uid").empty()) out.owner_uids.push_back(Str(o, "uid"));
    }
  }
  return out;
}

absl::Status CheckBootstrapUser(const ApiUser& user, const AgentIdentity& identity,
                                const std::optional<BootstrapPod>& pod) {
  // "system:serviceaccount:<namespace>:<name>"
  const std::vector<std::string> parts = absl::StrSplit(user.username, ':');
  if (parts.size() != 4 || parts[0] != "system" || parts[1] != "serviceaccount") {
    return absl::UnauthenticatedError(absl::StrCat("the token's user ", user.username, " is not a service account"));
  }
  if (parts[2] != identity.job_namespace) {
    return absl::UnauthenticatedError(absl::StrCat("the token's service account is in namespace ", parts[2],
                                                   ", not the job's ", identity.job_namespace));
  }
  const std::string pod_name = OneExtra(user, kPodNameExtra);
  if (pod_name.empty()) return absl::UnauthenticatedError("the token is not bound to a pod");
  if (pod_name != identity.pod) {
    return absl::UnauthenticatedError(absl::StrCat("the token is pod ", pod_name, "'s, not ", identity.pod, "'s"));
  }
  if (!pod.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat("pod ", identity.job_namespace, "/", identity.pod,
                                                   " is not among the job's pods"));
  }
  if (pod->uid.empty() || OneExtra(user, kPodUidExtra) != pod->uid) {
    return absl::UnauthenticatedError(
        absl::StrCat("the token was issued to another pod named ", identity.pod, " (its uid differs)"));
  }
  if (identity.job_uid.empty() ||
      std::find(pod->owner_uids.begin(), pod->owner_uids.end(), identity.job_uid) == pod->owner_uids.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat("pod ", identity.pod, " is not owned by job ", identity.job_namespace, "/", identity.job_name));
  }
  return absl::OkStatus();
}

KubeAgentBootstrapVerifier::KubeAgentBootstrapVerifier(Review review, PodLookup pods, Clock* clock,
                                                       AgentBootstrapOptions options)
    : review_(std::move(review)), pods_(std::move(pods)), clock_(clock), options_(options) {}

absl::StatusOr<ApiUser> KubeAgentBootstrapVerifier::Reviewed(const std::string& token) {
  const std::string key = Sha256Hex(token);
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.expires > clock_->Now()) return it->second.user;
  }
  absl::StatusOr<ApiUser> user = review_(token);  // without the lock: an API call
  if (!user.ok() && user.status().code() != absl::StatusCode::kUnauthenticated) return user;
  absl::MutexLock lock(&mu_);
  ++reviews_;
  const absl::Time now = clock_->Now();
  if (cache_.size() >= options_.cache_entries && !cache_.count(key)) {
    // Full: drop the expired verdicts, then the one that expires first.
    for (auto it = cache_.begin(); it != cache_.end();) it = it->second.expires <= now ? cache_.erase(it) : std::next(it);
    while (cache_.size() >= options_.cache_entries && !cache_.empty()) {
      auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                     [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; });
      cache_.erase(oldest);
    }
  }
  if (options_.cache_entries > 0) cache_[key] = Verdict{user, now + options_.cache_ttl};
  return user;
}

absl::Status KubeAgentBootstrapVerifier::Verify(const AgentIdentity& identity, const std::string& token) {
  absl::StatusOr<ApiUser> user = Reviewed(token);
  if (!user.ok()) return user.status();
  return CheckBootstrapUser(*user, identity, pods_(identity.job_namespace, identity.pod));
}

int KubeAgentBootstrapVerifier::ReviewsForTest() const {
  absl::MutexLock lock(&mu_);
  return reviews_;
}

size_t KubeAgentBootstrapVerifier::CachedForTest() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

KubeAgentBootstrapVerifier::PodLookup PodLookupFromInformer(Informer* pods) {
  return [pods](const std::string& ns, const std::string& name) -> std::optional<BootstrapPod> {
    ObjectPtr pod = pods->Get(absl::StrCat(ns, "/", name));
    if (pod == nullptr) return std::nullopt;
    return BootstrapPodFromObject(*pod);
  };
}

}  // namespace peregrine::kube
