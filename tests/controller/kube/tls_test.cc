// The Kubernetes REST client over real TLS. The test makes its own PKI at run time with
// the OpenSSL API (a CA, a server certificate for 127.0.0.1, a client certificate, and
// a second, unrelated CA), runs an httplib SSLServer on loopback (port bound to 0) and
// drives the client through kubeconfig text, as a user would:
//   - certificate-authority-data + client-certificate-data/client-key-data against a
//     server that requires client certificates: the request succeeds and the server saw
//     the client's certificate;
//   - a bearer token over TLS;
//   - a wrong CA fails with an error that names the server and the verification;
//   - a server requiring a client certificate refuses a client without one;
//   - insecure-skip-tls-verify is honoured only when set.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "controller/kube/config.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {
namespace {

using nlohmann::json;

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  REQUIRE(key != nullptr);
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  REQUIRE(ext != nullptr);
  REQUIRE(X509_add_ext(cert, ext, -1) == 1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, signed by issuer (self-signed when null).
Cert NewCert(const std::string& cn, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key, bool ca,
             const char* subject_alt_names, const char* extended_usage) {
  static long serial = 1;
  Cert cert(X509_new());
  REQUIRE(cert != nullptr);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  AddExtension(cert.get(), signer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  AddExtension(cert.get(), signer, NID_key_usage,
               ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature,keyEncipherment");
  AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (issuer != nullptr) AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always");
  if (subject_alt_names != nullptr) AddExtension(cert.get(), signer, NID_subject_alt_name, subject_alt_names);
  if (extended_usage != nullptr) AddExtension(cert.get(), signer, NID_ext_key_usage, extended_usage);
  REQUIRE(X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0);
  return cert;
}

std::string Pem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::string Pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

// The test PKI: "cluster CA" signs the API server's and the controller's certificates;
// "other CA" is an unrelated authority.
struct Pki {
  Pki() {
    ca_key = NewKey();
    ca = NewCert("test cluster CA", ca_key.get(), nullptr, nullptr, true, nullptr, nullptr);
    other_ca_key = NewKey();
    other_ca = NewCert("some other CA", other_ca_key.get(), nullptr, nullptr, true, nullptr, nullptr);
    server_key = NewKey();
    server = NewCert("kube-apiserver", server_key.get(), ca.get(), ca_key.get(), false,
                     "IP:127.0.0.1,DNS:localhost", "serverAuth");
    client_key = NewKey();
    client = NewCert("peregrine-controller", client_key.get(), ca.get(), ca_key.get(), false, nullptr, "clientAuth");
  }
  Key ca_key, other_ca_key, server_key, client_key;
  Cert ca, other_ca, server, client;
};

// An HTTPS API server on 127.0.0.1 answering GET of one pod; records what it saw.
class TlsApiServer {
 public:
  TlsApiServer(Pki& pki, bool require_client_cert) {
    X509_STORE* client_cas = nullptr;
    if (require_client_cert) {
      client_cas = X509_STORE_new();  // owned by the server's SSL_CTX from here on
      X509_STORE_add_cert(client_cas, pki.ca.get());
    }
    server_ = std::make_unique<httplib::SSLServer>(pki.server.get(), pki.server_key.get(), client_cas);
    REQUIRE(server_->is_valid());
    server_->Get("/api/v1/namespaces/train/pods/p0", [this](const httplib::Request& req, httplib::Response& res) {
      absl::MutexLock lock(&mu_);
      authorization_ = req.get_header_value("Authorization");
      if (X509* peer = SSL_get_peer_certificate(req.ssl); peer != nullptr) {
        char cn[256] = {0};
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof(cn) - 1);
        client_cn_ = cn;
        X509_free(peer);
      }
      res.set_content(R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"p0","namespace":"train"}})",
                      "application/json");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    // The socket listens from bind on: connections queue until the loop accepts them.
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  ~TlsApiServer() {
    // stop() only ends a loop that has started.
    for (int i = 0; i < 60000 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return absl::StrCat("https://127.0.0.1:", port_); }
  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }
  std::string client_cn() {
    absl::MutexLock lock(&mu_);
    return client_cn_;
  }

 private:
  std::unique_ptr<httplib::SSLServer> server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::string authorization_ ABSL_GUARDED_BY(mu_);
  std::string client_cn_ ABSL_GUARDED_BY(mu_);
};

// A kubeconfig with one cluster/user/context; `cluster_extra` and `user_fields` are
// YAML lines (already indented) for the cluster and the user.
std::string Kubeconfig(const std::string& server, const std::string& cluster_extra, const std::string& user_fields) {
  return absl::StrCat("apiVersion: v1\nkind: Config\ncurrent-context: test\n",
                      "clusters:\n- name: test\n  cluster:\n    server: ", server, "\n", cluster_extra,
                      "users:\n- name: test\n  user:\n", user_fields,
                      "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n");
}

std::string B64(const std::string& pem) { return absl::Base64Escape(pem); }

const ResourcePath kPods{"", "v1", "pods", "train"};

absl::StatusOr<json> GetPod(const std::string& kubeconfig) {
  absl::StatusOr<Config> config = ParseKubeconfig(kubeconfig, "test kubeconfig", "/nonexistent");
  if (!config.ok()) return config.status();
  RestClientOptions options;
  options.connect_timeout = absl::Seconds(30);
  auto client = RestClient::Create(*config, options);
  if (!client.ok()) return client.status();
  return (*client)->Get(kPods, "p0");
}

TEST_CASE("TLS: CA data and a client certificate from the kubeconfig", "[integration]") {
  Pki pki;
  TlsApiServer server(pki, /*require_client_cert=*/true);
  const std::string user = absl::StrCat("    client-certificate-data: ", B64(Pem(pki.client.get())), "\n",
                                        "    client-key-data: ", B64(Pem(pki.client_key.get())), "\n");
  const std::string cluster = absl::StrCat("    certificate-authority-data: ", B64(Pem(pki.ca.get())), "\n");

  auto pod = GetPod(Kubeconfig(server.url(), cluster, user));
  INFO(pod.status().ToString());
  REQUIRE(pod.ok());
  CHECK((*pod)["metadata"]["name"] == "p0");
  CHECK(server.client_cn() == "peregrine-controller");
  CHECK(server.authorization().empty());

  // Without the client certificate the server refuses the handshake.
  auto anonymous = GetPod(Kubeconfig(server.url(), cluster, "    token: abc\n"));
  REQUIRE_FALSE(anonymous.ok());
  CHECK_THAT(std::string(anonymous.status().message()), Catch::Contains(server.url()));
}

TEST_CASE("TLS: a bearer token over a verified connection", "[integration]") {
  Pki pki;
  TlsApiServer server(pki, /*require_client_cert=*/false);
  const std::string cluster = absl::StrCat("    certificate-authority-data: ", B64(Pem(pki.ca.get())), "\n");
  auto pod = GetPod(Kubeconfig(server.url(), cluster, "    token: s3cr3t-token\n"));
  INFO(pod.status().ToString());
  REQUIRE(pod.ok());
  CHECK(server.authorization() == "Bearer s3cr3t-token");
  CHECK(server.client_cn().empty());
}

TEST_CASE("TLS: a wrong CA fails with an error naming the server", "[integration]") {
  Pki pki;
  TlsApiServer server(pki, /*require_client_cert=*/false);
  const std::string wrong = absl::StrCat("    certificate-authority-data: ", B64(Pem(pki.other_ca.get())), "\n");
  auto pod = GetPod(Kubeconfig(server.url(), wrong, "    token: t\n"));
  REQUIRE_FALSE(pod.ok());
  const std::string message(pod.status().message());
  INFO(message);
  CHECK(absl::IsUnavailable(pod.status()));
  CHECK_THAT(message, Catch::Contains(server.url()));
  CHECK_THAT(message, Catch::Contains("verif"));
  CHECK_THAT(message, Catch::Contains("certificate-authority"));
  CHECK(server.authorization().empty());  // nothing was sent to an unverified server
}

TEST_CASE("TLS: insecure-skip-tls-verify is honoured only when set", "[integration]") {
  Pki pki;
  TlsApiServer server(pki, /*require_client_cert=*/false);
  // No CA: the system trust store does not know the test CA.
  auto verified = GetPod(Kubeconfig(server.url(), "", "    token: t1\n"));
  REQUIRE_FALSE(verified.ok());
  CHECK_THAT(std::string(verified.status().message()), Catch::Contains(server.url()));
  auto explicit_false = GetPod(Kubeconfig(server.url(), "    insecure-skip-tls-verify: false\n", "    token: t2\n"));
  REQUIRE_FALSE(explicit_false.ok());
  CHECK(server.authorization().empty());

  auto skipped = GetPod(Kubeconfig(server.url(), "    insecure-skip-tls-verify: true\n", "    token: t3\n"));
  INFO(skipped.status().ToString());
  REQUIRE(skipped.ok());
  CHECK(server.authorization() == "Bearer t3");
}

}  // namespace
}  // namespace peregrine::kube
