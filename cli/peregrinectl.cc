#include "cli/peregrinectl.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/analyze/analyze_command.h"
#include "cli/code_update_flags.h"
#include "cli/job_text.h"
#include "cli/kube_commands.h"
#include "cli/kube_credentials.h"
#include "proto/api/code_update_request.h"
#include "proto/api/fault_request.h"

namespace peregrine {
namespace {

constexpr char kUsage[] =
    "usage: peregrinectl [--controller URL | --state-dir DIR] [--token T | --token-file F]\n"
    "                    [--kubeconfig FILE] [--context NAME] [-n NAMESPACE] COMMAND ...\n"
    "  status [NAMESPACE/]NAME\n"
    "      phase, attempt, step, ETTR, standbys, machines, conditions and the latest incidents\n"
    "  incidents [NAMESPACE/]NAME\n"
    "      every incident: kind, signal, decision, actions, time lost, detected/decided/resumed\n"
    "  timeline [NAMESPACE/]NAME\n"
    "      the job's Kubernetes Events and its incidents' times, oldest first (Kubernetes only)\n"
    "  inject KIND [NAMESPACE/]NAME (--slot N | --machine ID) [--local-rank R]\n"
    "         [--factor F] [--fraction J] [--peer-slot N | --peer-machine ID] [--delay-us D] [--bandwidth B]\n"
    "      (local jobs only) KIND: kill (the machine dies), crash, hang, slow (--factor), jitter\n"
    "      (--fraction: each iteration's compute stretched by a random factor in [1-J, 1+J]), nan,\n"
    "      corrupt (silent wrong values in every NCCL payload), sdc (silently corrupted gradients\n"
    "      in the training step only), nvlink (payloads to GPUs of the same machine corrupted),\n"
    "      link (--delay-us and/or --bandwidth bytes/s), link-corrupt (payloads between\n"
    "      machines corrupted); link kinds act on the link to --peer-*, or without a peer on\n"
    "      every link of the machine (its NIC); clear (every fault, or only the faults of\n"
    "      --slot/--machine [--local-rank])\n"
    "  update [NAMESPACE/]NAME --revision R [--image I] [--command 'ARGV...'] [--urgent]\n"
    "      hot code update of a running job: --urgent restarts training in place with it\n"
    "      now; otherwise it is applied at the next failure-triggered restart or when\n"
    "      faultTolerance.hotUpdateWindowHours expire. --command is split on spaces\n"
    "      (--command-json '[\"python\", \"a b.py\"]' for arguments with spaces)\n"
    "  analyze steps FILE | nccl FILE | stacks DIR ...\n"
    "      offline analysis of your step-time CSVs, NCCL logs/traces and stack dumps\n"
    "      (peregrinectl analyze --help)\n"
    "Where the job is:\n"
    "- the controller's HTTP API: --controller http://HOST:PORT, or DIR/controller.json of\n"
    "  --state-dir, or .peregrine/<namespace>-<name>/controller.json when it exists (local mode);\n"
    "- else the Kubernetes API server, as the kubeconfig's user (what kubectl uses: --kubeconfig\n"
    "  or $KUBECONFIG or ~/.kube/config, --context or the current context; kubectl must be on\n"
    "  PATH to read it). The namespace is NAMESPACE/, else -n, else the context's namespace.\n"
    "  Installed as kubectl-peregrine on PATH, this is `kubectl peregrine COMMAND ...`.\n"
    "A Kubernetes-mode controller's HTTP API needs a Kubernetes bearer token allowed on the\n"
    "TrainingJob: --token T, or --token-file F (its first line), else the token or tokenFile of\n"
    "the kubeconfig's user, or the token its exec credential plugin returns (auth-provider\n"
    "plugins are not run: pass --token-file <(kubectl create token SA)).\n"
    "Exit codes: 0 done, 1 refused or failed, 2 usage.\n";

struct Args {
  std::string controller, state_dir, command, job, token, token_file, kubeconfig, context, namespace_;
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

std::optional<std::string> ParseArgs(const std::vector<std::string>& in, Args* a) {
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& s = in[i];
    if (s == "-n") {
      if (i + 1 >= in.size()) return std::string("-n: needs a value");
      a->namespace_ = in[++i];
    } else if (s.rfind("--", 0) == 0) {
      std::string name = s.substr(2), value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (name == "urgent") {  // a switch
        value = "true";
      } else {
        if (i + 1 >= in.size()) return absl::StrCat(s, ": needs a value");
        value = in[++i];
      }
      if (name == "controller") {
        a->controller = value;
      } else if (name == "state-dir") {
        a->state_dir = value;
      } else if (name == "token") {
        a->token = value;
      } else if (name == "token-file") {
        a->token_file = value;
      } else if (name == "kubeconfig") {
        a->kubeconfig = value;
      } else if (name == "context") {
        a->context = value;
      } else if (name == "namespace") {
        a->namespace_ = value;
      } else {
        a->flags[name] = value;
      }
    } else {
      a->positional.push_back(s);
    }
  }
  if (a->positional.empty()) return std::string("missing command");
  a->command = a->positional[0];
  return std::nullopt;
}

std::pair<std::string, std::string> SplitJob(const std::string& job, const std::string& namespace_flag) {
  std::vector<std::string> parts = absl::StrSplit(job, '/');
  if (parts.size() == 2) return {parts[0], parts[1]};
  return {namespace_flag.empty() ? "default" : namespace_flag, job};
}

// Whether a kubeconfig is there to use: named, or $KUBECONFIG, or ~/.kube/config.
bool KubeconfigAvailable(const Args& a) {
  if (!a.kubeconfig.empty() || !a.context.empty()) return true;
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') return true;
  const char* home = std::getenv("HOME");
  return home != nullptr && *home != '\0' && std::ifstream(std::string(home) + "/.kube/config").good();
}

std::optional<std::string> ControllerUrl(const Args& a, const std::string& ns, const std::string& name,
                                         std::string* error) {
  if (!a.controller.empty()) return a.controller;
  const std::string dir = a.state_dir.empty() ? absl::StrCat(".peregrine/", ns, "-", name) : a.state_dir;
  std::ifstream in(dir + "/controller.json");
  if (!in) {
    *error = absl::StrCat("cannot find the controller: no ", dir, "/controller.json (use --controller URL or --state-dir DIR, or a kubeconfig for the cluster: "
                          "--kubeconfig FILE, $KUBECONFIG or ~/.kube/config)");
    return std::nullopt;
  }
  try {
    return nlohmann::json::parse(in).at("http").get<std::string>();
  } catch (const std::exception& e) {
    *error = absl::StrCat(dir, "/controller.json: ", e.what());
    return std::nullopt;
  }
}

// The controller's JSON answer when it is a 200. Otherwise prints why not (unreachable; not
// JSON: `not_json` and the parser's message; the controller's {"error": ...}) and returns
// nullopt.
std::optional<nlohmann::json> JsonAnswer(const httplib::Result& res, const std::string& url, const char* not_json,
                                         std::ostream& err) {
  if (!res) {
    err << "peregrinectl: cannot reach the controller at " << url << ": " << httplib::to_string(res.error()) << "\n";
    return std::nullopt;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(res->body);
    if (res->status != 200) {
      err << "peregrinectl: " << j.value("error", res->body) << "\n";
      return std::nullopt;
    }
    return j;
  } catch (const std::exception& e) {
    err << "peregrinectl: " << not_json << ": " << e.what() << "\n";
    return std::nullopt;
  }
}

// POSTs a code update; prints the controller's message.
int Update(const Args& a, const std::function<httplib::Result(const std::function<httplib::Result()>&)>& send,
           httplib::Client& client, const std::string& url, const std::string& path,
           std::ostream& out, std::ostream& err) {
  absl::StatusOr<CodeUpdateRequest> r = CodeUpdateFromFlags(a.flags);
  if (!r.ok()) {
    err << "peregrinectl: " << r.status().message() << "\n";
    return 2;
  }
  const std::string body = CodeUpdateRequestToJson(*r);
  auto res = send([&] { return client.Post(absl::StrCat(path, "/code").c_str(), body, "application/json"); });
  if (!res) {
    err << "peregrinectl: cannot reach the controller at " << url << ": " << httplib::to_string(res.error()) << "\n";
    return 1;
  }
  const auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    err << "peregrinectl: unexpected answer (HTTP " << res->status << "): " << res->body << "\n";
    return 1;
  }
  if (res->status != 200) {
    err << "peregrinectl: " << j.value("error", res->body) << "\n";
    return 1;
  }
  out << j.value("message", "") << "\n";
  return 0;
}

}  // namespace

int RunPeregrinectl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  Args a;
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help")) {
    out << kUsage;
    return 0;
  }
  if (!argv.empty() && argv[0] == "analyze") {
    return RunAnalyze(std::vector<std::string>(argv.begin() + 1, argv.end()), out, err);
  }
  if (auto e = ParseArgs(argv, &a)) {
    err << "peregrinectl: " << *e << "\n" << kUsage;
    return 2;
  }
  const size_t job_index = a.command == "inject" ? 2 : 1;
  if (a.command != "status" && a.command != "incidents" && a.command != "timeline" && a.command != "inject" &&
      a.command != "update") {
    err << "peregrinectl: unknown command '" << a.command << "'\n" << kUsage;
    return 2;
  }
  if (a.positional.size() != job_index + 1) {
    err << "peregrinectl: " << a.command << " needs " << (a.command == "inject" ? "KIND and " : "")
        << "[NAMESPACE/]NAME\n" << kUsage;
    return 2;
  }
  auto [ns, name] = SplitJob(a.positional[job_index], a.namespace_);
  std::string token = a.token;
  if (!a.token.empty() && !a.token_file.empty()) {
    err << "peregrinectl: give --token or --token-file, not both\n";
    return 2;
  }
  if (!a.token_file.empty()) {
    std::ifstream in(a.token_file);
    if (!in || !std::getline(in, token) || absl::StripAsciiWhitespace(token).empty()) {
      err << "peregrinectl: --token-file " << a.token_file << ": cannot read a token from it\n";
      return 2;
    }
    token = std::string(absl::StripAsciiWhitespace(token));
  }
  // Which backend: the controller's API when it is named or a local state dir of the job
  // exists (and no kubeconfig or context is named), else the API server when there is a
  // kubeconfig.
  bool use_api = !a.controller.empty() || !a.state_dir.empty();
  if (!use_api && a.kubeconfig.empty() && a.context.empty()) {
    use_api = std::ifstream(absl::StrCat(".peregrine/", ns, "-", name, "/controller.json")).good();
  }
  if (!use_api && KubeconfigAvailable(a)) {
    if (a.command == "inject") {
      err << "peregrinectl: inject works on local jobs only: name their controller with --controller or "
             "--state-dir\n";
      return 2;
    }
    KubeCommandArgs k{a.kubeconfig, a.context, a.namespace_, token, a.command, a.positional[job_index], a.flags};
    return RunKubeCommand(k, out, err);
  }
  if (a.command == "timeline") {
    err << "peregrinectl: timeline reads the job's Kubernetes Events: run it against the cluster with a kubeconfig "
           "(without --controller or --state-dir)\n";
    return 2;
  }
  std::string error;
  auto url = ControllerUrl(a, ns, name, &error);
  if (!url) {
    err << "peregrinectl: " << error << "\n";
    return 1;
  }
  httplib::Client client(*url);
  if (!token.empty()) client.set_bearer_token_auth(token);
  // A controller that asks for a bearer token (Kubernetes mode) gets the kubeconfig's,
  // unless one was given; local controllers never ask, so no kubeconfig is read for them.
  auto send = [&](const std::function<httplib::Result()>& request) -> httplib::Result {
    httplib::Result res = request();
    if (!res || res->status != 401 || !token.empty() ||
        !absl::StartsWithIgnoreCase(res->get_header_value("WWW-Authenticate"), "Bearer")) {
      return res;
    }
    absl::StatusOr<std::string> kube_token = KubeconfigToken(a.kubeconfig, a.context);
    if (!kube_token.ok()) {
      err << "peregrinectl: the controller needs a Kubernetes bearer token and the kubeconfig gives none: "
          << kube_token.status().message() << " (pass --token or --token-file)\n";
      return res;
    }
    token = *kube_token;
    client.set_bearer_token_auth(token);
    return request();
  };
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  const std::string path = absl::StrCat("/api/v1/jobs/", ns, "/", name);

  if (a.command == "status" || a.command == "incidents") {
    constexpr char kNotStatus[] = "the controller answered something that is not a job status";
    const std::optional<nlohmann::json> j = JsonAnswer(send([&] { return client.Get(path.c_str()); }), *url, kNotStatus, err);
    if (!j) return 1;
    try {
      if (!j->is_object() || !j->contains("status") || !(*j)["status"].is_object()) {
        throw std::runtime_error("no status object");
      }
      if (a.command == "status") {
        PrintJobStatus(*j, out);
      } else {
        PrintJobIncidents(*j, out);
      }
    } catch (const std::exception& e) {
      err << "peregrinectl: " << kNotStatus << ": " << e.what() << "\n";
      return 1;
    }
    return 0;
  }

  if (a.command == "update") return Update(a, send, client, *url, path, out, err);

  // inject
  FaultRequest r;
  r.kind = a.positional[1];
  auto int_flag = [&](const char* flag, int* outv) -> bool {
    auto it = a.flags.find(flag);
    if (it == a.flags.end()) return true;
    if (!absl::SimpleAtoi(it->second, outv)) {
      err << "peregrinectl: --" << flag << ": not an integer: " << it->second << "\n";
      return false;
    }
    return true;
  };
  auto double_flag = [&](const char* flag, double* outv) -> bool {
    auto it = a.flags.find(flag);
    if (it == a.flags.end()) return true;
    if (!absl::SimpleAtod(it->second, outv)) {
      err << "peregrinectl: --" << flag << ": not a number: " << it->second << "\n";
      return false;
    }
    return true;
  };
  int delay = 0;
  if (!int_flag("slot", &r.slot) || !int_flag("local-rank", &r.local_rank) || !int_flag("peer-slot", &r.peer_slot) ||
      !int_flag("delay-us", &delay) || !double_flag("factor", &r.factor) || !double_flag("fraction", &r.fraction) ||
      !double_flag("bandwidth", &r.bandwidth_bytes_per_second)) {
    return 2;
  }
  r.delay_us = delay;
  if (auto it = a.flags.find("machine"); it != a.flags.end()) r.machine = it->second;
  if (auto it = a.flags.find("peer-machine"); it != a.flags.end()) r.peer_machine = it->second;
  for (const auto& [flag, value] : a.flags) {
    static const char* kKnown[] = {"slot", "local-rank", "peer-slot", "delay-us", "factor", "fraction", "bandwidth", "machine", "peer-machine"};
    if (std::find(std::begin(kKnown), std::end(kKnown), flag) == std::end(kKnown)) {
      err << "peregrinectl: unknown flag --" << flag << "\n" << kUsage;
      return 2;
    }
  }
  const std::string body = FaultRequestToJson(r);
  if (auto parsed = ParseFaultRequest(body); !parsed.ok()) {
    err << "peregrinectl: " << parsed.status().message() << "\n";
    return 2;
  }
  constexpr char kUnexpected[] = "unexpected answer";
  const std::optional<nlohmann::json> j =
      JsonAnswer(send([&] { return client.Post(absl::StrCat(path, "/faults").c_str(), body, "application/json"); }), *url,
                 kUnexpected, err);
  if (!j) return 1;
  try {
    out << j->value("result", "") << "\n";
  } catch (const std::exception& e) {
    err << "peregrinectl: " << kUnexpected << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace peregrine
