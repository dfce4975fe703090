#include "cli/exec_credential.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/process_output.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr absl::string_view kV1 = "client.authentication.k8s.io/v1";
constexpr absl::string_view kV1beta1 = "client.authentication.k8s.io/v1beta1";
constexpr absl::string_view kClusterExtension = "client.authentication.k8s.io/exec";

absl::Status Bad(absl::string_view user, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("kubeconfig user ", user, ": ", what));
}

}  // namespace

absl::StatusOr<ExecConfig> ParseExecConfig(const json& exec, absl::string_view user) {
  if (!exec.is_object()) return Bad(user, "exec is not an object");
  ExecConfig c;
  auto string_field = [&](const char* name, std::string* out) -> absl::Status {
    auto it = exec.find(name);
    if (it == exec.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_string()) return Bad(user, absl::StrCat("exec.", name, " is not a string"));
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  for (auto [name, out] : {std::pair{"apiVersion", &c.api_version}, std::pair{"command", &c.command},
                           std::pair{"installHint", &c.install_hint}, std::pair{"interactiveMode", &c.interactive_mode}}) {
    if (absl::Status s = string_field(name, out); !s.ok()) return s;
  }
  if (c.command.empty()) return Bad(user, "exec.command is missing");
  if (c.api_version != kV1 && c.api_version != kV1beta1) {
    return Bad(user, absl::StrCat("exec.apiVersion '", c.api_version, "' is not ", kV1, " or ", kV1beta1));
  }
  if (auto it = exec.find("args"); it != exec.end() && !it->is_null()) {
    if (!it->is_array()) return Bad(user, "exec.args is not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) return Bad(user, absl::StrCat("exec.args[", i, "] is not a string"));
      c.args.push_back((*it)[i].get<std::string>());
    }
  }
  if (auto it = exec.find("env"); it != exec.end() && !it->is_null()) {
    if (!it->is_array()) return Bad(user, "exec.env is not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty() ||
          (e.contains("value") && !e["value"].is_string())) {
        return Bad(user, absl::StrCat("exec.env[", i, "] needs a name and a string value"));
      }
      c.env[e["name"].get<std::string>()] = e.value("value", "");
    }
  }
  if (auto it = exec.find("provideClusterInfo"); it != exec.end() && !it->is_null()) {
    if (!it->is_boolean()) return Bad(user, "exec.provideClusterInfo is not a boolean");
    c.provide_cluster_info = it->get<bool>();
  }
  if (c.interactive_mode.empty() && c.api_version == kV1) {
    return Bad(user, "exec.interactiveMode is required for client.authentication.k8s.io/v1 (Never or IfAvailable)");
  }
  if (!c.interactive_mode.empty() && c.interactive_mode != "Never" && c.interactive_mode != "IfAvailable" &&
      c.interactive_mode != "Always") {
    return Bad(user, absl::StrCat("exec.interactiveMode '", c.interactive_mode, "' is not Never, IfAvailable or Always"));
  }
  if (c.interactive_mode == "Always") {
    return absl::FailedPreconditionError(absl::StrCat(
        "kubeconfig user ", user, ": the exec credential plugin ", c.command,
        " needs a terminal (interactiveMode Always), which peregrinectl does not give it; log in with kubectl first "
        "or use a plugin that caches its credential"));
  }
  return c;
}

std::string ExecInfo(const ExecConfig& config, const json& cluster) {
  json spec = {{"interactive", false}};
  if (config.provide_cluster_info && cluster.is_object()) {
    json c = json::object();
    // Kubernetes' Cluster type shadows the kubeconfig's, with CA data always as bytes
    // (base64 in JSON, as --flatten leaves it).
    for (const char* field : {"server", "tls-server-name", "insecure-skip-tls-verify", "certificate-authority-data",
                              "proxy-url", "disable-compression"}) {
      if (auto it = cluster.find(field); it != cluster.end()) c[field] = *it;
    }
    if (auto ext = cluster.find("extensions"); ext != cluster.end() && ext->is_array()) {
      for (const json& e : *ext) {
        if (e.is_object() && e.value("name", "") == kClusterExtension && e.contains("extension")) {
          c["config"] = e["extension"];
        }
      }
    }
    spec["cluster"] = std::move(c);
  }
  return json{{"apiVersion", config.api_version}, {"kind", "ExecCredential"}, {"spec", std::move(spec)}}.dump();
}

absl::StatusOr<ExecCredential> ParseExecCredential(absl::string_view stdout_text, const ExecConfig& config,
                                                   absl::string_view user) {
  const std::string who = absl::StrCat("the exec credential plugin ", config.command);
  const json j = json::parse(stdout_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(user, absl::StrCat(who, " printed no JSON object"));
  if (j.value("kind", "") != "ExecCredential") {
    return Bad(user, absl::StrCat(who, " printed kind '", j.value("kind", ""), "', not ExecCredential"));
  }
  if (j.value("apiVersion", "") != config.api_version) {
    return Bad(user, absl::StrCat(who, " answered apiVersion '", j.value("apiVersion", ""), "' to a request for ",
                                  config.api_version));
  }
  auto status = j.find("status");
  if (status == j.end() || !status->is_object()) return Bad(user, absl::StrCat(who, " printed no status"));
  ExecCredential c;
  auto field = [&](const char* name) {
    auto it = status->find(name);
    return it != status->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  c.token = field("token");
  c.client_certificate_pem = field("clientCertificateData");
  c.client_key_pem = field("clientKeyData");
  c.expiration_timestamp = field("expirationTimestamp");
  if (c.client_certificate_pem.empty() != c.client_key_pem.empty()) {
    return Bad(user, absl::StrCat(who, " returned a client ",
                                  c.client_key_pem.empty() ? "certificate without its key" : "key without its certificate"));
  }
  if (c.token.empty() && c.client_certificate_pem.empty()) {
    return Bad(user, absl::StrCat(who, " returned neither a token nor a client certificate"));
  }
  return c;
}

absl::StatusOr<ExecCredential> RunExecCredentialPlugin(const ExecConfig& config, const json& cluster,
                                                       absl::string_view user, const std::string& kubeconfig_dir) {
  std::string command = config.command;
  if (!kubeconfig_dir.empty() && absl::StrContains(command, '/') && !absl::StartsWith(command, "/")) {
    command = absl::StrCat(kubeconfig_dir, "/", command);
  }
  std::vector<std::string> argv = {command};
  argv.insert(argv.end(), config.args.begin(), config.args.end());
  std::map<std::string, std::string> env = config.env;
  env["KUBERNETES_EXEC_INFO"] = ExecInfo(config, cluster);
  absl::StatusOr<std::string> out = RunForOutput(argv, env);
  if (!out.ok()) {
    std::string message = absl::StrCat("kubeconfig user ", user, ": exec credential plugin: ", out.status().message());
    if (!config.install_hint.empty() && absl::StrContains(out.status().message(), "could not be run")) {
      absl::StrAppend(&message, "\n", config.install_hint);
    }
    return absl::UnavailableError(message);
  }
  return ParseExecCredential(*out, config, user);
}

}  // namespace peregrine
