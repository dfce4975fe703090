#include "cli/kube_job_client.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace peregrine {

using nlohmann::json;

namespace {

constexpr char kJobResource[] = "trainingjobs.peregrine.dev";
constexpr char kEventResource[] = "events";

// Percent-encodes a query value.
std::string QueryEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The certificates of a PEM bundle in a new store; null when it holds none.
X509_STORE* StoreFromPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  X509_STORE* store = X509_STORE_new();
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  BIO_free(bio);
  if (added == 0) {
    X509_STORE_free(store);
    return nullptr;
  }
  return store;
}

}  // namespace

class KubeJobClient::Impl {
 public:
  Impl(KubeEndpoint endpoint, std::unique_ptr<httplib::ClientImpl> http, std::string prefix)
      : endpoint_(std::move(endpoint)), http_(std::move(http)), prefix_(std::move(prefix)) {}

  // The request's answer as JSON, or the error it means (see the header).
  absl::StatusOr<json> Send(const std::string& verb, const char* resource, const std::string& ns,
                            const std::string& name, const std::string& path, const std::string* body) {
    httplib::Headers headers = {{"Accept", "application/json"}};
    const std::string url = prefix_ + path;
    httplib::Result res = body == nullptr
                              ? http_->Get(url.c_str(), headers)
                              : http_->Patch(url.c_str(), headers, *body, "application/merge-patch+json");
    if (!res) return absl::UnavailableError(Unreachable(res.error()));
    const json answer = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (res->status >= 200 && res->status < 300) {
      if (answer.is_discarded() || !answer.is_object()) {
        return absl::InternalError(absl::StrCat(verb, " ", resource, " in namespace ", ns, ": the API server at ",
                                                endpoint_.server, " answered something that is not JSON"));
      }
      return answer;
    }
    std::string message = absl::StrCat("HTTP ", res->status);
    if (answer.is_object() && answer.contains("message") && answer["message"].is_string()) {
      message = answer["message"].get<std::string>();
    } else if (!res->body.empty()) {
      message = std::string(absl::StripAsciiWhitespace(res->body.substr(0, 300)));
    }
    const std::string user = endpoint_.user.empty() ? "(anonymous)" : endpoint_.user;
    switch (res->status) {
      case 401:
        return absl::UnauthenticatedError(
            absl::StrCat("the API server at ", endpoint_.server, " did not accept the credentials of kubeconfig user ",
                         user, " (context ", endpoint_.context, ") to ", verb, " ", resource,
                         ": HTTP 401 Unauthorized: ", message, "; check the user's token or client certificate"));
      case 403:
        return absl::PermissionDeniedError(absl::StrCat(
            "forbidden: kubeconfig user ", user, " may not ", verb, " ", resource, " in namespace ", ns, ": ", message,
            "; check with: kubectl auth can-i ", verb, " ", resource, " -n ", ns));
      case 404: {
        const json details = answer.is_object() ? answer.value("details", json::object()) : json::object();
        const bool named = details.is_object() && details.contains("name");
        if (resource == std::string(kJobResource) && named) {
          return absl::NotFoundError(absl::StrCat("TrainingJob ", name, " not found in namespace ", ns,
                                                  " (kubectl get trainingjobs -n ", ns, " lists them)"));
        }
        return absl::NotFoundError(absl::StrCat("the API server at ", endpoint_.server, " does not serve ", resource,
                                                " (", message, "): is Peregrine's TrainingJob CRD installed?"));
      }
      case 400:
      case 422:
        return absl::InvalidArgumentError(
            absl::StrCat("the API server refused to ", verb, " ", resource, " ", ns, "/", name, ": ", message));
      default:
        return absl::InternalError(absl::StrCat(verb, " ", resource, " in namespace ", ns, ": HTTP ", res->status,
                                                " from the API server at ", endpoint_.server, ": ", message));
    }
  }

  std::string Unreachable(httplib::Error error) {
    std::string text = absl::StrCat("cannot reach the API server at ", endpoint_.server, " (kubeconfig context ",
                                    endpoint_.context, "): ", httplib::to_string(error));
    if (error == httplib::Error::SSLServerVerification) {
      auto* ssl = dynamic_cast<httplib::SSLClient*>(http_.get());
      const long verify = ssl != nullptr ? ssl->get_openssl_verify_result() : X509_V_OK;
      absl::StrAppend(&text, " (",
                      verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                                          : "the server's certificate does not name the host",
                      "; check certificate-authority(-data) of the kubeconfig's cluster)");
    }
    return text;
  }

  const KubeEndpoint& endpoint() const { return endpoint_; }

 private:
  KubeEndpoint endpoint_;
  std::unique_ptr<httplib::ClientImpl> http_;
  std::string prefix_;  // the server URL's path, without a trailing '/'
};

absl::StatusOr<std::unique_ptr<KubeJobClient>> KubeJobClient::Create(const KubeEndpoint& endpoint) {
  const std::string where = absl::StrCat("kubeconfig context ", endpoint.context);
  const bool tls = absl::StartsWith(endpoint.server, "https://");
  if (!tls && !absl::StartsWith(endpoint.server, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": server '", endpoint.server, "' is not an http(s) URL"));
  }
  std::string rest = endpoint.server.substr(tls ? 8 : 7);
  std::string prefix;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  }
  std::string host = rest;
  int port = tls ? 443 : 80;
  const size_t close = rest.rfind(']');
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
    host = rest.substr(0, colon);
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": server '", endpoint.server, "' has a bad port"));
    }
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": server '", endpoint.server, "' has no host"));

  std::unique_ptr<httplib::ClientImpl> http;
  if (tls) {
    std::unique_ptr<httplib::SSLClient> ssl;
    if (!endpoint.client_certificate_pem.empty()) {
      BIO* cert_bio = BIO_new_mem_buf(endpoint.client_certificate_pem.data(),
                                      static_cast<int>(endpoint.client_certificate_pem.size()));
      BIO* key_bio = BIO_new_mem_buf(endpoint.client_key_pem.data(), static_cast<int>(endpoint.client_key_pem.size()));
      X509* cert = cert_bio != nullptr ? PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr) : nullptr;
      EVP_PKEY* key = key_bio != nullptr ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr) : nullptr;
      BIO_free(cert_bio);
      BIO_free(key_bio);
      if (cert == nullptr || key == nullptr) {
        X509_free(cert);
        EVP_PKEY_free(key);
        return absl::InvalidArgumentError(absl::StrCat(where, ": user ", endpoint.user, "'s client-certificate",
                                                       cert == nullptr ? "" : "-key", " is not PEM"));
      }
      ssl = std::make_unique<httplib::SSLClient>(host, port, cert, key);  // takes its own references
      X509_free(cert);
      EVP_PKEY_free(key);
    } else {
      ssl = std::make_unique<httplib::SSLClient>(host, port);
    }
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the client certificate or key of user ", endpoint.user, " was rejected by OpenSSL"));
    }
    if (!endpoint.ca_pem.empty()) {
      X509_STORE* store = StoreFromPem(endpoint.ca_pem);
      if (store == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": the cluster's certificate-authority holds no PEM certificate"));
      }
      ssl->set_ca_cert_store(store);  // owned by the client's SSL context from here
    }
    ssl->enable_server_certificate_verification(!endpoint.insecure_skip_tls_verify);
    http = std::move(ssl);
  } else {
    http = std::make_unique<httplib::ClientImpl>(host, port);
  }
  if (!endpoint.token.empty()) http->set_bearer_token_auth(endpoint.token.c_str());
  http->set_connection_timeout(10);
  http->set_read_timeout(30);
  http->set_write_timeout(30);
  http->set_default_headers({{"User-Agent", "peregrinectl"}});
  return std::unique_ptr<KubeJobClient>(
      new KubeJobClient(std::make_unique<Impl>(endpoint, std::move(http), std::move(prefix))));
}

KubeJobClient::KubeJobClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeJobClient::~KubeJobClient() = default;

namespace {
std::string JobPath(const std::string& ns, const std::string& name) {
  return absl::StrCat("/apis/peregrine.dev/v1alpha1/namespaces/", ns, "/trainingjobs/", name);
}
}  // namespace

absl::StatusOr<json> KubeJobClient::GetJob(const std::string& ns, const std::string& name) {
  return impl_->Send("get", kJobResource, ns, name, JobPath(ns, name), nullptr);
}

absl::StatusOr<json> KubeJobClient::MergePatchJob(const std::string& ns, const std::string& name, const json& patch) {
  const std::string body = patch.dump();
  return impl_->Send("patch", kJobResource, ns, name, JobPath(ns, name), &body);
}

absl::StatusOr<json> KubeJobClient::ListJobEvents(const std::string& ns, const std::string& name) {
  const std::string selector = QueryEscape(absl::StrCat("involvedObject.kind=TrainingJob,involvedObject.name=", name));
  json items = json::array();
  std::string next;
  do {
    std::string path = absl::StrCat("/api/v1/namespaces/", ns, "/events?fieldSelector=", selector, "&limit=500");
    if (!next.empty()) absl::StrAppend(&path, "&continue=", QueryEscape(next));
    absl::StatusOr<json> page = impl_->Send("list", kEventResource, ns, name, path, nullptr);
    if (!page.ok()) return page.status();
    for (const json& item : page->value("items", json::array())) items.push_back(item);
    next.clear();
    if (auto meta = page->find("metadata"); meta != page->end() && meta->is_object()) {
      next = meta->value("continue", "");
    }
  } while (!next.empty());
  return items;
}

}  // namespace peregrine
