// TLS for the agents' gRPC channel, server side: credentials from a certificate chain, its
// private key and the CA bundle the agents trust, all PEM files. The certificate and key
// are watched: when the files change (a rotated Kubernetes Secret), new handshakes use the
// new pair without restarting the server; established streams keep theirs. Agents are not
// asked for client certificates (they authenticate with their job's token).
//
// Errors: kInvalidArgument for a half-configured set (a certificate without a key, ...),
// kNotFound / kInvalidArgument naming the file that is missing, unreadable or not PEM.
// Thread-safe (pure functions; the returned credentials are gRPC's, shareable).
#ifndef PEREGRINE_CONTROLLER_AGENT_TLS_H_
#define PEREGRINE_CONTROLLER_AGENT_TLS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace peregrine {

struct AgentTlsFiles {
  std::string cert_file;  // PEM certificate chain of the server (leaf first)
  std::string key_file;   // PEM private key of the leaf certificate
  std::string ca_file;    // PEM CA bundle the agents verify the server with

  // True when any file is named (TLS is wanted); Validate checks the set is whole.
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// OK when all three files are named, readable and hold PEM blocks of the right kind
// (CERTIFICATE for the chain and the bundle, a PRIVATE KEY for the key). The error names
// the flag (--agent-tls-cert, --agent-tls-key, --agent-tls-ca) and the file.
absl::Status ValidateAgentTlsFiles(const AgentTlsFiles& files);

// Server credentials serving `files` (validated first), re-reading the certificate and key
// every `refresh` (at least one second; gRPC keeps the last good pair while a half-written
// update does not match).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> AgentServerCredentials(const AgentTlsFiles& files,
                                                                                 absl::Duration refresh);

// The content of the CA bundle file (validated as above), e.g. to hand it to the agents.
absl::StatusOr<std::string> ReadAgentCaBundle(const std::string& ca_file);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_TLS_H_
