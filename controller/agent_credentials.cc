#include "controller/agent_credentials.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/hmac.h"
#include "base/secret_token.h"

namespace peregrine {

absl::Status ValidateAgentKey(absl::string_view key) {
  if (key.size() != kSecretTokenBits / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent key must be ", kSecretTokenBits / 4, " hex characters, got ", key.size()));
  }
  for (char c : key) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("agent key has a character that is not hexadecimal");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DeriveAgentCredential(absl::string_view key, const AgentIdentity& identity) {
  if (absl::Status s = ValidateAgentKey(key); !s.ok()) return s;
  if (identity.job_namespace.empty()) return absl::InvalidArgumentError("agent identity has no job namespace");
  if (identity.job_name.empty()) return absl::InvalidArgumentError("agent identity has no job name");
  if (identity.pod.empty()) return absl::InvalidArgumentError("agent identity has no pod name");
  for (const std::string* part : {&identity.job_namespace, &identity.job_name, &identity.job_uid, &identity.pod}) {
    if (part->find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("agent identity part \"", *part, "\" contains '/'"));
    }
  }
  // No part holds a '/' (as in Kubernetes namespaces, names and uids), so the message is
  // unambiguous: no two identities share one.
  return HmacSha256Hex(key, absl::StrCat(identity.job_namespace, "/", identity.job_name, "/", identity.job_uid, "/",
                                         identity.pod));
}

// The message starts with "data/" and the credentials' with the namespace; the two
// could only meet for a credential of namespace "data" whose pod is named after a job
// uid, and the controller's pod names (<job>-m<N>, <job>-s<N>) are never one.
absl::StatusOr<std::string> DeriveDataToken(absl::string_view key, absl::string_view job_namespace,
                                            absl::string_view job_name, absl::string_view job_uid) {
  if (absl::Status s = ValidateAgentKey(key); !s.ok()) return s;
  if (job_namespace.empty()) return absl::InvalidArgumentError("data token: no job namespace");
  if (job_name.empty()) return absl::InvalidArgumentError("data token: no job name");
  for (absl::string_view part : {job_namespace, job_name, job_uid}) {
    if (part.find('/') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("data token: job identity part \"", part, "\" contains '/'"));
    }
  }
  return HmacSha256Hex(key, absl::StrCat("data/", job_namespace, "/", job_name, "/", job_uid));
}

absl::Status VerifyAgentCredential(absl::string_view key, const AgentIdentity& identity,
                                   absl::string_view presented) {
  absl::StatusOr<std::string> expected = DeriveAgentCredential(key, identity);
  if (!expected.ok()) return expected.status();
  if (presented.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("no credential presented for pod ", identity.pod));
  }
  if (!SecretTokensEqual(presented, *expected)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the credential presented is not pod ", identity.pod, "'s of job ", identity.job_namespace, "/",
                     identity.job_name));
  }
  return absl::OkStatus();
}

}  // namespace peregrine
