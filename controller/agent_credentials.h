// Agent credentials: the per-pod bearer token an agent presents on its AgentService
// stream, and the per-job token of the agents' checkpoint data channel (DeriveDataToken). A credential is
//   hex(HMAC-SHA256(agent key, "<namespace>/<job>/<job uid>/<pod>"))
// (64 hex characters), so it opens exactly one pod of one incarnation of one job: pod P's
// credential does not open pod Q, and job A's does not open job B or a re-created A.
// Verifying one needs only the controller's agent key (a 256-bit secret from
// base/secret_token.h, kept in a file across controller restarts), no stored state.
//
// How a pod first gets its credential is the bootstrap (docs/security.md): in Kubernetes
// the agent presents a projected service-account token, which an AgentBootstrapVerifier
// checks (controller/kube/agent_bootstrap.h); in local mode the controller writes each
// agent's credential into a 0400 file. The RegisterAck then carries the credential.
//
// Pure functions; thread-safe. Errors: kInvalidArgument naming the empty part of an
// identity or a key of the wrong size; kUnauthenticated for a credential that does not
// match.
#ifndef PEREGRINE_CONTROLLER_AGENT_CREDENTIALS_H_
#define PEREGRINE_CONTROLLER_AGENT_CREDENTIALS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

// Who an agent claims to be. `job_uid` may be empty where the cluster has none (local
// mode); the other parts may not.
struct AgentIdentity {
  std::string job_namespace;
  std::string job_name;
  std::string job_uid;
  std::string pod;
};

// The job's checkpoint data-channel token:
//   hex(HMAC-SHA256(agent key, "data/<namespace>/<job>/<job uid>"))
// Every agent of one incarnation of the job gets it in its RegisterAck; another job's (or
// a re-created job's) token differs. `job_uid` may be empty (local mode).
absl::StatusOr<std::string> DeriveDataToken(absl::string_view key, absl::string_view job_namespace,
                                            absl::string_view job_name, absl::string_view job_uid);

// The agent key: 64 hex characters (256 bits), as NewSecretToken() returns.
absl::Status ValidateAgentKey(absl::string_view key);

// The credential of `identity` under `key`.
absl::StatusOr<std::string> DeriveAgentCredential(absl::string_view key, const AgentIdentity& identity);

// OK when `presented` is the credential of `identity` (constant-time comparison);
// kUnauthenticated otherwise, naming the pod (never the expected value).
absl::Status VerifyAgentCredential(absl::string_view key, const AgentIdentity& identity,
                                   absl::string_view presented);

// Checks a bootstrap token (a first registration's proof of identity, before the agent
// has a credential). Implementations may do I/O (a TokenReview) and are called without
// the registry's lock held, from the RPC threads.
class AgentBootstrapVerifier {
 public:
  virtual ~AgentBootstrapVerifier() = default;
  // OK when `token` proves it was issued to the pod `identity.pod` of that job;
  // kUnauthenticated (with the reason) when it does not; kUnavailable when it could not
  // be checked now (the agent retries).
  virtual absl::Status Verify(const AgentIdentity& identity, const std::string& token) = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_CREDENTIALS_H_
