#include "controller/agent_tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <initializer_list>

#include "absl/strings/str_cat.h"

// The server's credentials are gRPC's TlsServerCredentials over a
// FileWatcherCertificateProvider: gRPC re-reads the key and certificate files every
// refresh interval on a thread of its own and, when they changed and the key matches the
// certificate, serves the new pair to new handshakes. A TLS session (and the HTTP/2
// connection and streams over it) keeps the certificate it was made with, so rotating
// the files never breaks an agent's established stream. Kubernetes updates a mounted
// Secret by swapping a symlink, so the key and certificate change together.
//
// The provider reads the files lazily and, when they are missing or malformed, handshakes
// simply fail; so the files are checked here first, and a bad one is an error at start
// naming it instead of a server that refuses every agent.

namespace peregrine {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is required for agent TLS"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  return text;
}

// True when `text` holds a complete PEM block ("-----BEGIN <label>-----" ...
// "-----END <label>-----") whose label is one of `labels`.
bool HasPemBlock(const std::string& text, std::initializer_list<const char*> labels) {
  for (const char* label : labels) {
    const std::string begin = absl::StrCat("-----BEGIN ", label, "-----");
    const std::string end = absl::StrCat("-----END ", label, "-----");
    const size_t at = text.find(begin);
    if (at != std::string::npos && text.find(end, at + begin.size()) != std::string::npos) return true;
  }
  return false;
}

absl::StatusOr<std::string> ReadPemOf(const std::string& flag, const std::string& path,
                                      std::initializer_list<const char*> labels, const char* what) {
  absl::StatusOr<std::string> text = ReadPem(flag, path);
  if (!text.ok()) return text.status();
  if (!HasPemBlock(*text, labels)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no PEM ", what));
  }
  return text;
}

constexpr std::initializer_list<const char*> kCertificate = {"CERTIFICATE"};
constexpr std::initializer_list<const char*> kPrivateKey = {"PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"};

}  // namespace

absl::Status ValidateAgentTlsFiles(const AgentTlsFiles& files) {
  if (auto s = ReadPemOf("--agent-tls-cert", files.cert_file, kCertificate, "certificate"); !s.ok()) {
    return s.status();
  }
  if (auto s = ReadPemOf("--agent-tls-key", files.key_file, kPrivateKey, "private key"); !s.ok()) {
    return s.status();
  }
  if (auto s = ReadAgentCaBundle(files.ca_file); !s.ok()) return s.status();
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadAgentCaBundle(const std::string& ca_file) {
  return ReadPemOf("--agent-tls-ca", ca_file, kCertificate, "CA certificate");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> AgentServerCredentials(const AgentTlsFiles& files,
                                                                                 absl::Duration refresh) {
  if (auto s = ValidateAgentTlsFiles(files); !s.ok()) return s;
  const auto refresh_s = static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.key_file,
                                                                                        files.cert_file, refresh_s);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::experimental::TlsServerCredentials(options);
  if (credentials == nullptr) {
    return absl::InternalError(absl::StrCat("gRPC refused the TLS credentials of ", files.cert_file));
  }
  return credentials;
}

}  // namespace peregrine
