#include "controller/kube/config.h"

#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace peregrine::kube {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " file '", path, "'"));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading ", what, " file '", path, "'"));
  }
  return out.str();
}

std::string Resolve(absl::string_view base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return absl::StrCat(base_dir, "/", path);
}

// Finds the entry named `name` in a kubeconfig list (clusters/users/contexts) and returns
// its `inner` map.
absl::StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const char* list, const char* inner,
                                     const std::string& name, absl::string_view source) {
  const YAML::Node entries = root[list];
  if (!entries || !entries.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field '", list, "' is missing or not a list"));
  }
  for (const YAML::Node& entry : entries) {
    if (!entry.IsMap() || !entry["name"]) continue;
    if (entry["name"].as<std::string>() != name) continue;
    const YAML::Node body = entry[inner];
    if (!body || !body.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", list, "[name=", name,
                                                     "].", inner, " is missing or not a map"));
    }
    return body;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": no entry named '", name, "' in '", list, "'"));
}

std::string OptionalString(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  if (!v || v.IsNull()) return "";
  return v.as<std::string>();
}

// Reads a "<field>-data" (base64) or "<field>" (path) pair into PEM text.
absl::StatusOr<std::string> PemField(const YAML::Node& map, const std::string& field,
                                     absl::string_view where, absl::string_view base_dir) {
  const std::string data = OptionalString(map, (field + "-data").c_str());
  if (!data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(absl::StripAsciiWhitespace(data), &decoded) || decoded.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", field, "-data is not valid base64"));
    }
    if (!absl::StrContains(decoded, "-----BEGIN")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", field, "-data does not decode to PEM text"));
    }
    return decoded;
  }
  const std::string path = OptionalString(map, field.c_str());
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text = ReadWholeFile(Resolve(base_dir, path), field);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(where, ".", field, ": ", text.status().message()));
  }
  if (!absl::StrContains(*text, "-----BEGIN")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", field, ": file '", path, "' is not PEM text"));
  }
  return *text;
}

absl::Status CheckServer(const std::string& server, absl::string_view where) {
  if (server.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".server is missing"));
  }
  if (!absl::StartsWith(server, "https://") && !absl::StartsWith(server, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".server '", server, "' is not an http(s) URL"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ParseKubeconfigNode(const YAML::Node& root, absl::string_view source,
                                           absl::string_view base_dir,
                                           absl::string_view context_override) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a kubeconfig (no top-level map)"));
  }
  std::string context_name(context_override);
  if (context_name.empty()) context_name = OptionalString(root, "current-context");
  if (context_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field 'current-context' is missing or empty"));
  }
  absl::StatusOr<YAML::Node> context = FindNamed(root, "contexts", "context", context_name, source);
  if (!context.ok()) return context.status();
  const std::string where_context = absl::StrCat(source, ": contexts[name=", context_name, "]");
  const std::string cluster_name = OptionalString(*context, "cluster");
  if (cluster_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where_context, ".context.cluster is missing"));
  }
  const std::string user_name = OptionalString(*context, "user");

  Config config;
  config.source = absl::StrCat(source, ", context ", context_name);
  const std::string ns = OptionalString(*context, "namespace");
  if (!ns.empty()) config.default_namespace = ns;

  absl::StatusOr<YAML::Node> cluster = FindNamed(root, "clusters", "cluster", cluster_name, source);
  if (!cluster.ok()) return cluster.status();
  const std::string where_cluster = absl::StrCat(source, ": clusters[name=", cluster_name, "].cluster");
  config.server = OptionalString(*cluster, "server");
  if (absl::Status s = CheckServer(config.server, where_cluster); !s.ok()) return s;
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (const YAML::Node skip = (*cluster)["insecure-skip-tls-verify"]; skip && !skip.IsNull()) {
    config.insecure_skip_tls_verify = skip.as<bool>();
  }
  absl::StatusOr<std::string> ca = PemField(*cluster, "certificate-authority", where_cluster, base_dir);
  if (!ca.ok()) return ca.status();
  config.ca_pem = *std::move(ca);

  if (user_name.empty()) return config;  // anonymous
  absl::StatusOr<YAML::Node> user = FindNamed(root, "users", "user", user_name, source);
  if (!user.ok()) return user.status();
  const std::string where_user = absl::StrCat(source, ": users[name=", user_name, "].user");
  if ((*user)["exec"] || (*user)["auth-provider"]) {
    return absl::UnimplementedError(absl::StrCat(
        where_user, " uses an exec or auth-provider credential plugin, which is not supported; "
                    "use a token, tokenFile or client certificate"));
  }
  config.bearer_token = OptionalString(*user, "token");
  const std::string token_file = OptionalString(*user, "tokenFile");
  if (!token_file.empty()) config.bearer_token_file = Resolve(base_dir, token_file);
  absl::StatusOr<std::string> cert = PemField(*user, "client-certificate", where_user, base_dir);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = PemField(*user, "client-key", where_user, base_dir);
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where_user, ": client-certificate and client-key must be given together"));
  }
  config.client_certificate_pem = *std::move(cert);
  config.client_key_pem = *std::move(key);
  return config;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<Config> ParseKubeconfig(absl::string_view yaml_text, absl::string_view source_name,
                                       absl::string_view base_dir,
                                       absl::string_view context_name) {
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    return ParseKubeconfigNode(root, source_name, base_dir, context_name);
  } catch (const std::exception& e) {
    // yaml-cpp reports both syntax errors and type mismatches (e.g. a map where a
    // string belongs) as exceptions; they stay inside this adapter.
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": malformed kubeconfig: ", e.what()));
  }
}

absl::StatusOr<Config> LoadKubeconfigFile(const std::string& path, absl::string_view context_name) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  return ParseKubeconfig(*text, absl::StrCat("kubeconfig ", path), DirName(path), context_name);
}

absl::StatusOr<Config> LoadInClusterConfig(absl::string_view service_account_dir,
                                           absl::string_view service_host,
                                           absl::string_view service_port) {
  if (service_host.empty() || service_port.empty()) {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset");
  }
  const std::string dir(service_account_dir);
  Config config;
  config.source = absl::StrCat("in-cluster service account ", dir);
  const std::string host(service_host);
  // An IPv6 service address needs brackets in a URL.
  config.server = absl::StrCat("https://", absl::StrContains(host, ":") ? "[" + host + "]" : host,
                               ":", service_port);
  const std::string token_path = dir + "/token";
  absl::StatusOr<std::string> token = ReadWholeFile(token_path, "service-account token");
  if (!token.ok()) return token.status();
  config.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
  if (config.bearer_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("service-account token file '", token_path,
                                                   "' is empty"));
  }
  config.bearer_token_file = token_path;
  const std::string ca_path = dir + "/ca.crt";
  absl::StatusOr<std::string> ca = ReadWholeFile(ca_path, "service-account CA");
  if (!ca.ok()) return ca.status();
  if (!absl::StrContains(*ca, "-----BEGIN CERTIFICATE")) {
    return absl::InvalidArgumentError(
        absl::StrCat("service-account CA file '", ca_path, "' holds no PEM certificate"));
  }
  config.ca_pem = *std::move(ca);
  absl::StatusOr<std::string> ns = ReadWholeFile(dir + "/namespace", "service-account namespace");
  if (ns.ok()) {
    const std::string trimmed(absl::StripAsciiWhitespace(*ns));
    if (!trimmed.empty()) config.default_namespace = trimmed;
  }
  return config;
}

absl::StatusOr<Config> LoadDefaultConfig() {
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    const std::vector<std::string> paths = absl::StrSplit(env, ':', absl::SkipEmpty());
    if (!paths.empty()) return LoadKubeconfigFile(paths.front());
  }
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host != nullptr && *host != '\0') {
    return LoadInClusterConfig(kServiceAccountDir, host, port == nullptr ? "" : port);
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return absl::NotFoundError(
        "no Kubernetes configuration: KUBECONFIG, KUBERNETES_SERVICE_HOST and HOME are unset");
  }
  return LoadKubeconfigFile(absl::StrCat(home, "/.kube/config"));
}

}  // namespace peregrine::kube
