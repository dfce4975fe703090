#include "cli/kube_credentials.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

using nlohmann::json;

// Runs argv (execvp), returning its stdout when it exits 0, else its stderr.
absl::StatusOr<std::string> Capture(const std::vector<std::string>& argv) {
  int out[2], errp[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  if (pipe2(errp, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::UnavailableError("pipe failed");
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(errp[1], 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(errp[1]);
  if (pid < 0) {
    close(out[0]);
    close(errp[0]);
    return absl::UnavailableError("fork failed");
  }
  // kubectl's outputs are small; read stdout, then stderr (a full stderr pipe would
  // need more than 64 KiB of messages).
  auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
    close(fd);
    return s;
  };
  std::string stdout_text = drain(out[0]);
  std::string stderr_text = drain(errp[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return absl::UnavailableError(absl::StrCat(argv[0], code == 127 ? " could not be run" : " failed", ": ",
                                               absl::StripAsciiWhitespace(stderr_text)));
  }
  return stdout_text;
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
  if (user.contains("exec") || user.contains("auth-provider")) {
    return absl::UnimplementedError(absl::StrCat("kubeconfig user ", name,
                                                 " uses an exec or auth-provider credential plugin, which "
                                                 "peregrinectl does not run"));
  }
  KubeTokenSource source;
  if (auto t = user.find("token"); t != user.end() && t->is_string() && !t->get<std::string>().empty()) {
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
  absl::StatusOr<std::string> text = Capture(argv);
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
  absl::StatusOr<json> minified = KubeconfigView(kubeconfig, context, /*flatten=*/false);
  if (!minified.ok()) return minified.status();
  absl::StatusOr<KubeTokenSource> source = KubeconfigUserToken(*minified);
  if (!source.ok()) return source.status();
  if (!source->token.empty()) return source->token;
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
  if (user->contains("exec") || user->contains("auth-provider")) {
    return absl::UnimplementedError(absl::StrCat("kubeconfig user ", e.user,
                                                 " uses an exec or auth-provider credential plugin, which "
                                                 "peregrinectl does not run (pass --token or --token-file)"));
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
  if (!e.ok() || token_file.empty()) return e;
  absl::StatusOr<std::string> token = FirstLineOf(token_file);
  if (!token.ok()) return token.status();
  e->token = *token;
  return e;
}

}  // namespace peregrine
