#include "cli/kube_credentials.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
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

absl::StatusOr<std::string> KubeconfigToken(const std::string& kubeconfig, const std::string& context) {
  std::vector<std::string> argv = {"kubectl", "config", "view", "--raw", "--minify", "-o", "json"};
  if (!kubeconfig.empty()) argv.insert(argv.end(), {"--kubeconfig", kubeconfig});
  if (!context.empty()) argv.insert(argv.end(), {"--context", context});
  absl::StatusOr<std::string> text = Capture(argv);
  if (!text.ok()) return text.status();
  const json minified = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (minified.is_discarded()) return absl::UnavailableError("kubectl config view printed no JSON");
  absl::StatusOr<KubeTokenSource> source = KubeconfigUserToken(minified);
  if (!source.ok()) return source.status();
  if (!source->token.empty()) return source->token;
  std::ifstream in(source->token_file);
  std::string token;
  if (!in || !std::getline(in, token) || absl::StripAsciiWhitespace(token).empty()) {
    return absl::NotFoundError(absl::StrCat("the kubeconfig's tokenFile ", source->token_file, " holds no token"));
  }
  return std::string(absl::StripAsciiWhitespace(token));
}

}  // namespace peregrine
