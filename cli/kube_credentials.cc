#include "cli/kube_credentials.h"

#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/process_output.h"

namespace peregrine {
namespace {

using nlohmann::json;

// Where kubectl resolves a relative exec command: the kubeconfig file's directory. With
// several files merged ($KUBECONFIG with ':') the file is not known: "" (the working
// directory).
std::string KubeconfigDir(const std::string& kubeconfig) {
  std::string file = kubeconfig;
  if (file.empty()) {
    const char* env = std::getenv("KUBECONFIG");
    if (env != nullptr && *env != '\0') {
      file = env;
      if (absl::StrContains(file, ':')) return "";
    } else if (const char* home = std::getenv("HOME"); home != nullptr) {
      file = absl::StrCat(home, "/.kube/config");
    }
  }
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace

absl::StatusOr<KubeTokenSource> KubeconfigUserToken(const json& minified) {
  const auto users = minified.find("users");
  if (!minified.is_object() || users == minified.end() || !users->is_array() || users->empty()) {
    return absl::NotFoundError("the kubeconfig's context names no user");
  }
  const json& entry = (*users)[0];
  const std::string name = entry.value("name", "");
  const json user = entry.value("user", json::object());
  if (!user.is_object()) return absl::NotFoundError(absl::StrCat("kubeconfig user ", name, " has no credentials"));
  if (user.contains("auth-provider")) {
    return absl::UnimplementedError(absl::StrCat("kubeconfig user ", name,
                                                 " uses a legacy auth-provider plugin, which peregrinectl does not run "
                                                 "(use an exec credential plugin, or pass --token or --token-file)"));
  }
  KubeTokenSource source;
  if (auto x = user.find("exec"); x != user.end() && !x->is_null()) {
    absl::StatusOr<ExecConfig> exec = ParseExecConfig(*x, name);
    if (!exec.ok()) return exec.status();
    source.exec = *std::move(exec);
  } else if (auto t = user.find("token"); t != user.end() && t->is_string() && !t->get<std::string>().empty()) {
    source.token = t->get<std::string>();
  } else if (auto f = user.find("tokenFile"); f != user.end() && f->is_string() && !f->get<std::string>().empty()) {
    source.token_file = f->get<std::string>();
  } else {
    return absl::NotFoundError(absl::StrCat("kubeconfig user ", name, " has no token or tokenFile"));
  }
  return source;
}

namespace {

// kubectl config view --raw --minify [--flatten] -o json, parsed.
absl::StatusOr<json> KubeconfigView(const std::string& kubeconfig, const std::string& context, bool flatten) {
  std::vector<std::string> argv = {"kubectl", "config", "view", "--raw", "--minify", "-o", "json"};
  if (flatten) argv.push_back("--flatten");
  if (!kubeconfig.empty()) argv.insert(argv.end(), {"--kubeconfig", kubeconfig});
  if (!context.empty()) argv.insert(argv.end(), {"--context", context});
  absl::StatusOr<std::string> text = RunForOutput(argv);
  if (!text.ok()) return text.status();
  const json minified = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (minified.is_discarded()) return absl::UnavailableError("kubectl config view printed no JSON");
  return minified;
}

absl::StatusOr<std::string> FirstLineOf(const std::string& token_file) {
  std::ifstream in(token_file);
  std::string token;
  if (!in || !std::getline(in, token) || absl::StripAsciiWhitespace(token).empty()) {
    return absl::NotFoundError(absl::StrCat("the kubeconfig's tokenFile ", token_file, " holds no token"));
  }
  return std::string(absl::StripAsciiWhitespace(token));
}

// The named entry's inner object (entries are {"name": n, key: {...}}), or null.
const json* Entry(const json& view, const char* list, const char* key) {
  auto it = view.find(list);
  if (it == view.end() || !it->is_array() || it->empty() || !(*it)[0].is_object()) return nullptr;
  auto inner = (*it)[0].find(key);
  return inner != (*it)[0].end() && inner->is_object() ? &*inner : nullptr;
}

std::string NameOf(const json& view, const char* list) {
  auto it = view.find(list);
  if (it == view.end() || !it->is_array() || it->empty() || !(*it)[0].is_object()) return "";
  return (*it)[0].value("name", "");
}

std::string StringField(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

absl::StatusOr<std::string> KubeconfigToken(const std::string& kubeconfig, const std::string& context) {
  absl::StatusOr<json> minified = KubeconfigView(kubeconfig, context, /*flatten=*/true);
  if (!minified.ok()) return minified.status();
  absl::StatusOr<KubeTokenSource> source = KubeconfigUserToken(*minified);
  if (!source.ok()) return source.status();
  if (!source->token.empty()) return source->token;
  if (source->exec) {
    const json* cluster = Entry(*minified, "clusters", "cluster");
    const std::string user = NameOf(*minified, "users");
    absl::StatusOr<ExecCredential> credential =
        RunExecCredentialPlugin(*source->exec, cluster ? *cluster : json(), user, KubeconfigDir(kubeconfig));
    if (!credential.ok()) return credential.status();
    if (credential->token.empty()) {
      return absl::NotFoundError(absl::StrCat("kubeconfig user ", user,
                                              ": the exec credential plugin returned a client certificate, not a "
                                              "token (the controller's API takes bearer tokens: pass --token)"));
    }
    return credential->token;
  }
  return FirstLineOf(source->token_file);
}

absl::StatusOr<KubeEndpoint> KubeEndpointFromView(const json& minified, std::string* token_file) {
  token_file->clear();
  if (!minified.is_object()) return absl::InvalidArgumentError("the kubeconfig view is not an object");
  KubeEndpoint e;
  e.context = StringField(minified, "current-context");
  const json* context = Entry(minified, "contexts", "context");
  if (context == nullptr) return absl::InvalidArgumentError("the kubeconfig has no current context (kubectl config use-context NAME, or --context)");
  e.namespace_ = StringField(*context, "namespace");
  if (e.namespace_.empty()) e.namespace_ = "default";
  const std::string cluster_name = NameOf(minified, "clusters");
  const json* cluster = Entry(minified, "clusters", "cluster");
  const std::string where = absl::StrCat("kubeconfig context ", e.context);
  if (cluster == nullptr) return absl::InvalidArgumentError(absl::StrCat(where, " names no cluster"));
  e.server = StringField(*cluster, "server");
  if (!absl::StartsWith(e.server, "https://") && !absl::StartsWith(e.server, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cluster ", cluster_name, " has ",
                                                   e.server.empty() ? "no server" : "server '" + e.server + "'",
                                                   " (expected an https:// or http:// URL)"));
  }
  auto decode = [&](const json& object, const char* field, const std::string& owner, std::string* out) -> absl::Status {
    const std::string data = StringField(object, field);
    if (data.empty()) return absl::OkStatus();
    if (!absl::Base64Unescape(data, out) || out->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", owner, " ", field, " is not base64"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = decode(*cluster, "certificate-authority-data", "cluster " + cluster_name, &e.ca_pem); !s.ok()) return s;
  if (auto it = cluster->find("insecure-skip-tls-verify"); it != cluster->end() && it->is_boolean()) {
    e.insecure_skip_tls_verify = it->get<bool>();
  }
  e.user = NameOf(minified, "users");
  const json* user = Entry(minified, "users", "user");
  if (user == nullptr) return e;  // anonymous
  const std::string owner = "user " + e.user;
  if (user->contains("auth-provider")) {
    return absl::UnimplementedError(absl::StrCat("kubeconfig user ", e.user,
                                                 " uses a legacy auth-provider plugin, which peregrinectl does not run "
                                                 "(use an exec credential plugin, or pass --token or --token-file)"));
  }
  if (auto x = user->find("exec"); x != user->end() && !x->is_null()) {
    absl::StatusOr<ExecConfig> exec = ParseExecConfig(*x, e.user);
    if (!exec.ok()) return exec.status();
    e.exec = *std::move(exec);
  }
  if (absl::Status s = decode(*user, "client-certificate-data", owner, &e.client_certificate_pem); !s.ok()) return s;
  if (absl::Status s = decode(*user, "client-key-data", owner, &e.client_key_pem); !s.ok()) return s;
  if (e.client_certificate_pem.empty() != e.client_key_pem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", owner, " has a client ",
                                                   e.client_key_pem.empty() ? "certificate without its key" : "key without its certificate"));
  }
  e.token = StringField(*user, "token");
  if (e.token.empty()) *token_file = StringField(*user, "tokenFile");
  return e;
}

absl::StatusOr<KubeEndpoint> LoadKubeEndpoint(const std::string& kubeconfig, const std::string& context) {
  absl::StatusOr<json> minified = KubeconfigView(kubeconfig, context, /*flatten=*/true);
  if (!minified.ok()) return minified.status();
  std::string token_file;
  absl::StatusOr<KubeEndpoint> e = KubeEndpointFromView(*minified, &token_file);
  if (!e.ok()) return e;
  if (e->exec) {
    const json* cluster = Entry(*minified, "clusters", "cluster");
    absl::StatusOr<ExecCredential> credential =
        RunExecCredentialPlugin(*e->exec, cluster ? *cluster : json(), e->user, KubeconfigDir(kubeconfig));
    if (!credential.ok()) return credential.status();
    // The plugin's credential replaces the kubeconfig's, as in client-go.
    if (!credential->token.empty()) e->token = credential->token;
    if (!credential->client_certificate_pem.empty()) {
      e->client_certificate_pem = credential->client_certificate_pem;
      e->client_key_pem = credential->client_key_pem;
    }
    return e;
  }
  if (token_file.empty()) return e;
  absl::StatusOr<std::string> token = FirstLineOf(token_file);
  if (!token.ok()) return token.status();
  e->token = *token;
  return e;
}

}  // namespace peregrine
