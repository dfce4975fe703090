// peregrinectl's Kubernetes backend (cli/kube_commands.h) against the fake API server
// (tests/fakes): a TrainingJob with the full sample status (status_samples.h) in
// namespace ml, Events about it, and a kubeconfig written here whose context points at
// the fake. status, incidents and timeline print what the object holds; update patches
// spec.codeVersion and the hot-update annotation exactly; 403, 404, an unreachable
// server and bad kubeconfigs give messages naming what is wrong. The last case runs the
// real kubectl (scripts/install-tools.sh puts it in .tools/bin), which finds
// build/bin/kubectl-peregrine on PATH and forwards `kubectl peregrine status`.
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/code_update_flags.h"
#include "cli/job_text.h"
#include "cli/peregrinectl.h"
#include "controller/status_json.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/captured_run.h"
#include "tests/testing/child_process.h"
#include "tests/testing/ports.h"
#include "tests/testing/status_samples.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr char kJobs[] = "trainingjobs.peregrine.dev";

// The kubectl of scripts/install-tools.sh, put first on this process's PATH so that
// peregrinectl (which runs `kubectl config view`) uses it too.
std::string Kubectl() {
  const std::filesystem::path kubectl = std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".tools/bin/kubectl";
  if (!std::filesystem::exists(kubectl)) {
    FAIL(kubectl.string() << " is missing: run scripts/install-tools.sh (installs helm and kubectl into .tools/bin)");
  }
  static const bool path_set = [&] {
    const char* path = ::getenv("PATH");
    const std::string dir = kubectl.parent_path().string();
    ::setenv("PATH", (dir + ":" + (path != nullptr ? path : "/usr/bin:/bin")).c_str(), 1);
    return true;
  }();
  (void)path_set;
  return kubectl.string();
}

std::string KubeconfigText(const std::string& server, const std::string& ns, const std::string& user) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: fake\n  cluster:\n    server: " +
         server + "\ncontexts:\n- name: dev\n  context:\n    cluster: fake\n    user: alice\n" +
         (ns.empty() ? "" : "    namespace: " + ns + "\n") + "users:\n- name: alice\n  user:\n" + user;
}

// The fake with TrainingJob ml/llm (sample status), Events about it, about another job,
// and about an earlier job of the same name; a kubeconfig for it (namespace ml).
struct Cluster {
  testing::FakeKubeApiServer api;
  testing::TempDir dir{"kubectl-peregrine"};
  std::string kubeconfig;
  std::string uid;

  Cluster() {
    REQUIRE(api.Start().ok());
    json job = {{"apiVersion", "peregrine.dev/v1alpha1"},
                {"kind", "TrainingJob"},
                {"metadata", {{"name", "llm"}, {"namespace", "ml"}, {"annotations", {{"team", "lm"}}}}},
                {"spec",
                 {{"machines", 2},
                  {"gpusPerMachine", 8},
                  {"parallelism", {{"tensor", 8}, {"pipeline", 1}, {"data", 2}}},
                  {"codeVersion", {{"image", "registry.example.com/llm:1"}, {"command", {"python", "train.py"}},
                                   {"revision", "r1"}}}}}};
    auto created = api.CreateForTest(kJobs, "ml", job);
    REQUIRE(created.ok());
    uid = (*created)["metadata"]["uid"].get<std::string>();
    const json status = json::parse(JobStatusToJson(testing::PopulatedStatus()));
    REQUIRE(api.MutateStatusForTest(kJobs, "ml", "llm", [&](json& s) { s = status; }).ok());
    auto event = [&](const std::string& name, const std::string& job_name, const std::string& job_uid,
                     const std::string& type, const std::string& reason, const std::string& message,
                     const std::string& first, int count, const std::string& last) {
      json e = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", "ml"}}},
                {"involvedObject",
                 {{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"name", job_name},
                  {"namespace", "ml"}, {"uid", job_uid}}},
                {"type", type},
                {"reason", reason},
                {"message", message},
                {"count", count},
                {"firstTimestamp", first},
                {"lastTimestamp", last}};
      REQUIRE(api.CreateForTest("events", "ml", e).ok());
    };
    // Created in reverse time order: the timeline sorts them.
    event("llm.3", "llm", uid, "Warning", "MachineEvicted", "evicted node-7 (Xid 79)", "2025-01-02T03:14:07Z", 1,
          "2025-01-02T03:14:07Z");
    event("llm.2", "llm", uid, "Warning", "ProcessExited", "rank 3 exited with code 1", "2025-01-02T03:05:45Z", 3,
          "2025-01-02T03:05:50Z");
    event("llm.1", "llm", uid, "Normal", "PodsCreated", "created 2 pods", "2025-01-02T03:04:10Z", 1,
          "2025-01-02T03:04:10Z");
    event("other.1", "other", "uid-other", "Normal", "PodsCreated", "other job's pods", "2025-01-02T03:04:11Z", 1,
          "2025-01-02T03:04:11Z");
    event("llm.old", "llm", "uid-of-an-earlier-llm", "Warning", "Stale", "the deleted llm's event",
          "2025-01-01T00:00:00Z", 1, "2025-01-01T00:00:00Z");
    kubeconfig = dir.Write("config", KubeconfigText(api.base_url(), "ml", "    token: tok-alice\n"));
  }

  testing::CapturedRun Ctl(std::vector<std::string> args) {
    Kubectl();
    args.insert(args.begin(), {"--kubeconfig", kubeconfig});
    return testing::RunCaptured([&](std::ostream& out, std::ostream& err) { return RunPeregrinectl(args, out, err); });
  }
};

TEST_CASE("kubectl peregrine status reads the TrainingJob's status through the API server as the kubeconfig user", "[integration]") {
  Cluster c;
  const testing::CapturedRun r = c.Ctl({"status", "llm"});  // namespace ml from the context
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("job ml/llm: 2 machines x 8 GPUs, TP=8 PP=1 DP=2"));
  CHECK_THAT(r.out, Catch::Contains("phase Recovering  attempt 3"));
  CHECK_THAT(r.out, Catch::Contains("ETTR 0.930"));
  CHECK_THAT(r.out, Catch::Contains("Degraded=True (MachineFault): incident 2: Xid 79 on node-7"));
  CHECK_THAT(r.out, Catch::Contains("StandbyReady=False (PoolFilling): 0 of 1 standbys ready"));
  CHECK_THAT(r.out, Catch::Contains("incidents: 2\n"));
  CHECK_THAT(r.out, Catch::Contains("Xid 79 on node-7\n    decision: evict+standby"));
  CHECK(c.api.LastAuthorizationForTest() == "Bearer tok-alice");
  // NAMESPACE/NAME and -n name the namespace too; a job elsewhere is not found there.
  CHECK(c.Ctl({"status", "ml/llm"}).out == r.out);
  CHECK(c.Ctl({"-n", "ml", "status", "llm"}).out == r.out);
  const testing::CapturedRun other = c.Ctl({"--namespace", "prod", "status", "llm"});
  CHECK(other.code == 1);
  CHECK_THAT(other.err, Catch::Contains("TrainingJob llm not found in namespace prod"));
}

TEST_CASE("kubectl peregrine incidents lists every incident with its decision, actions and time lost", "[integration]") {
  Cluster c;
  const testing::CapturedRun r = c.Ctl({"incidents", "llm"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("job ml/llm: 2 incidents"));
  CHECK_THAT(r.out, Catch::Contains("rank 3 exited with code 1\n    decision: reattempt"));
  CHECK_THAT(r.out, Catch::Contains("    - RestartInPlace\n"));
  CHECK_THAT(r.out, Catch::Contains("    - Evict\n    - ActivateStandby\n    - RestartInPlace\n"));
  CHECK_THAT(r.out, Catch::Contains("detected 2025-01-02T03:05:45.123456Z  decided 2025-01-02T03:05:46.123456Z  "
                                    "resumed 2025-01-02T03:06:15.123456Z"));
}

TEST_CASE("kubectl peregrine timeline merges the job's Events and its incidents in time order", "[integration]") {
  Cluster c;
  const testing::CapturedRun r = c.Ctl({"timeline", "llm"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Contains("job ml/llm: 3 events, 2 incidents"));
  CHECK_FALSE(absl::StrContains(r.out, "other job's pods"));
  CHECK_FALSE(absl::StrContains(r.out, "the deleted llm's event"));
  const std::vector<std::string> order = {
      "PodsCreated",                      // 03:04:10
      "rank 3 exited with code 1 (x3",    // the Event at 03:05:45 (count 3)
      "incident #1 detected",             // 03:05:45.123456
      "incident #1 decided",              // 03:05:46.123456
      "incident #1 resumed",              // 03:06:15.123456
      "incident #2 detected",             // 03:14:05.123456
      "incident #2 decided",              // 03:14:06.123456
      "MachineEvicted",                   // 03:14:07
  };
  size_t at = 0;
  for (const std::string& s : order) {
    const size_t found = r.out.find(s, at);
    INFO(s);
    REQUIRE(found != std::string::npos);
    at = found;
  }
}

TEST_CASE("kubectl peregrine update merge-patches spec.codeVersion and the hot-update annotation", "[integration]") {
  Cluster c;
  const json before = *c.api.GetForTest(kJobs, "ml", "llm");
  const testing::CapturedRun urgent =
      c.Ctl({"update", "llm", "--revision", "r2", "--image", "registry.example.com/llm:2", "--command",
             "python train.py --resume", "--urgent"});
  INFO(urgent.err);
  REQUIRE(urgent.code == 0);
  CHECK_THAT(urgent.out, Catch::Contains("TrainingJob ml/llm now asks for code revision r2 (generation 2); urgent"));
  CHECK(c.api.RequestCountForTest("patch", kJobs) == 1);
  json after = *c.api.GetForTest(kJobs, "ml", "llm");
  CHECK(after["spec"]["codeVersion"] == json({{"image", "registry.example.com/llm:2"},
                                              {"command", {"python", "train.py", "--resume"}},
                                              {"revision", "r2"}}));
  CHECK(after["metadata"]["annotations"] == json({{"team", "lm"}, {kHotUpdateAnnotationName, "urgent"}}));
  // Nothing else of the spec or the status moved.
  json rest = after["spec"], rest_before = before["spec"];
  rest.erase("codeVersion");
  rest_before.erase("codeVersion");
  CHECK(rest == rest_before);
  CHECK(after["status"] == before["status"]);

  // A lazy update keeps image and command, sets the revision and removes the annotation.
  const testing::CapturedRun lazy = c.Ctl({"update", "ml/llm", "--revision", "r3"});
  INFO(lazy.err);
  REQUIRE(lazy.code == 0);
  CHECK_THAT(lazy.out, Catch::Contains("revision r3 (generation 3); lazy"));
  after = *c.api.GetForTest(kJobs, "ml", "llm");
  CHECK(after["spec"]["codeVersion"] == json({{"image", "registry.example.com/llm:2"},
                                              {"command", {"python", "train.py", "--resume"}},
                                              {"revision", "r3"}}));
  CHECK(after["metadata"]["annotations"] == json({{"team", "lm"}}));

  // Bad flags are usage errors and write nothing; a job that is not there is not patched.
  CHECK(c.Ctl({"update", "llm"}).code == 2);
  CHECK(c.Ctl({"update", "llm", "--revision", "r4", "--command", ""}).code == 2);
  CHECK(c.Ctl({"update", "llm", "--revision", "r4", "--frobnicate", "x"}).code == 2);
  const testing::CapturedRun missing = c.Ctl({"update", "gone", "--revision", "r4"});
  CHECK(missing.code == 1);
  CHECK_THAT(missing.err, Catch::Contains("TrainingJob gone not found in namespace ml"));
  CHECK(c.api.RequestCountForTest("patch", kJobs) == 2);
}

TEST_CASE("kubectl peregrine explains 401, 403, 404, an unreachable server and bad kubeconfigs", "[integration]") {
  Cluster c;
  c.api.FailNextRequestsForTest("get", kJobs, 1, 403);
  const testing::CapturedRun forbidden = c.Ctl({"status", "llm"});
  CHECK(forbidden.code == 1);
  CHECK_THAT(forbidden.err, Catch::Contains("forbidden: kubeconfig user alice may not get trainingjobs.peregrine.dev "
                                            "in namespace ml"));
  CHECK_THAT(forbidden.err, Catch::Contains("kubectl auth can-i get trainingjobs.peregrine.dev -n ml"));
  c.api.FailNextRequestsForTest("patch", kJobs, 1, 403);
  const testing::CapturedRun no_patch = c.Ctl({"update", "llm", "--revision", "r9"});
  CHECK(no_patch.code == 1);
  CHECK_THAT(no_patch.err, Catch::Contains("kubectl auth can-i patch trainingjobs.peregrine.dev -n ml"));
  c.api.FailNextRequestsForTest("list", "events", 1, 403);
  CHECK_THAT(c.Ctl({"timeline", "llm"}).err, Catch::Contains("kubectl auth can-i list events -n ml"));
  c.api.FailNextRequestsForTest("get", kJobs, 1, 401);
  const testing::CapturedRun unauthorized = c.Ctl({"status", "llm"});
  CHECK(unauthorized.code == 1);
  CHECK_THAT(unauthorized.err, Catch::Contains("did not accept the credentials of kubeconfig user alice"));
  CHECK(c.api.GetForTest(kJobs, "ml", "llm")->at("spec").at("codeVersion").at("revision") == "r1");

  const testing::CapturedRun missing = c.Ctl({"incidents", "nope"});
  CHECK(missing.code == 1);
  CHECK_THAT(missing.err, Catch::Contains("TrainingJob nope not found in namespace ml"));

  Kubectl();
  auto run = [](std::vector<std::string> args) {
    return testing::RunCaptured([&](std::ostream& out, std::ostream& err) { return RunPeregrinectl(args, out, err); });
  };
  const std::string closed = c.dir.Write(
      "closed", KubeconfigText(absl::StrCat("http://127.0.0.1:", testing::FreeLoopbackPort()), "", "    token: t\n"));
  const testing::CapturedRun unreachable = run({"--kubeconfig", closed, "status", "llm"});
  CHECK(unreachable.code == 1);
  CHECK_THAT(unreachable.err, Catch::Contains("cannot reach the API server at http://127.0.0.1:"));
  CHECK_THAT(unreachable.err, Catch::Contains("kubeconfig context dev"));

  const testing::CapturedRun no_file = run({"--kubeconfig", c.dir.Path("absent"), "status", "llm"});
  CHECK(no_file.code == 1);
  CHECK_THAT(no_file.err, Catch::Contains("cannot use " + c.dir.Path("absent")));
  const std::string no_server = c.dir.Write("no-server", KubeconfigText("", "", "    token: t\n"));
  CHECK_THAT(run({"--kubeconfig", no_server, "status", "llm"}).err, Catch::Contains("cluster fake has no server"));
  const std::string bad_ca = c.dir.Write(
      "bad-ca", KubeconfigText("https://127.0.0.1:6443\n    certificate-authority-data: '%%%'", "", "    token: t\n"));
  CHECK_THAT(run({"--kubeconfig", bad_ca, "status", "llm"}).err,
             Catch::Contains("base64"));
  // An exec credential plugin (EKS, GKE, AKS): its token is the bearer token; a broken
  // stanza is named.
  const std::string get_token = c.dir.Write(
      "get-token", "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
                   "\"status\":{\"token\":\"tok-from-plugin\"}}'\n");
  std::filesystem::permissions(get_token, std::filesystem::perms::owner_all);
  const std::string plugin = c.dir.Write(
      "plugin", KubeconfigText(c.api.base_url(), "ml",
                               "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: " + get_token +
                                   "\n      interactiveMode: Never\n"));
  const testing::CapturedRun via_plugin = run({"--kubeconfig", plugin, "status", "llm"});
  INFO(via_plugin.err);
  CHECK(via_plugin.code == 0);
  CHECK(c.api.LastAuthorizationForTest() == "Bearer tok-from-plugin");
  const std::string bad_plugin = c.dir.Write(
      "bad-plugin", KubeconfigText(c.api.base_url(), "",
                                   "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: get-token\n"));
  CHECK_THAT(run({"--kubeconfig", bad_plugin, "status", "llm"}).err, Catch::Contains("exec.interactiveMode is required"));
  CHECK(run({"--kubeconfig", c.kubeconfig, "--context", "prod", "status", "llm"}).code == 1);
  // inject is local-only; a name that is not an object name never reaches a URL.
  CHECK(run({"--kubeconfig", c.kubeconfig, "inject", "kill", "llm", "--slot", "0"}).code == 2);
  CHECK(run({"--kubeconfig", c.kubeconfig, "status", "../x"}).code == 2);
}

TEST_CASE("kubectl runs build/bin/kubectl-peregrine as its plugin: kubectl plugin list and kubectl peregrine status", "[integration]") {
  Cluster c;
  const std::string kubectl = Kubectl();
  const std::string bin = std::string(PEREGRINE_BINARY_DIR) + "/bin";
  REQUIRE(std::filesystem::exists(bin + "/kubectl-peregrine"));
  const std::string path = bin + ":" + std::filesystem::path(kubectl).parent_path().string() + ":/usr/bin:/bin";
  auto run = [&](const std::vector<std::string>& args, const std::string& name) {
    testing::ChildProcess::Options o;
    o.argv = {kubectl};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env = {{"PATH", path}, {"HOME", c.dir.path()}, {"KUBECONFIG", c.kubeconfig}};
    o.stdout_path = c.dir.Path(name + ".out");
    o.stderr_path = c.dir.Path(name + ".err");
    auto child = testing::ChildProcess::Start(o);
    REQUIRE(child != nullptr);
    const std::optional<int> status = child->Wait(std::chrono::minutes(2));
    REQUIRE(status.has_value());
    auto read = [](const std::string& file) {
      std::ifstream in(file);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    return std::make_pair(WIFEXITED(*status) ? WEXITSTATUS(*status) : -1,
                          read(o.stdout_path) + read(o.stderr_path));
  };
  const auto [list_code, list] = run({"plugin", "list"}, "list");
  INFO(list);
  CHECK_THAT(list, Catch::Contains(bin + "/kubectl-peregrine"));
  // kubectl forwards the words after `kubectl peregrine`; the plugin reads $KUBECONFIG.
  const auto [code, text] = run({"peregrine", "status", "llm"}, "status");
  INFO(text);
  CHECK(code == 0);
  CHECK_THAT(text, Catch::Contains("job ml/llm: 2 machines x 8 GPUs"));
  CHECK_THAT(text, Catch::Contains("phase Recovering  attempt 3"));
  const auto [missing_code, missing] = run({"peregrine", "-n", "prod", "status", "llm"}, "missing");
  CHECK(missing_code == 1);
  CHECK_THAT(missing, Catch::Contains("TrainingJob llm not found in namespace prod"));
}

TEST_CASE("job text: a status of the wrong shape prints what it can and never throws", "[unit]") {
  const json hostile = {{"namespace", 1},
                        {"name", "x"},
                        {"spec", {{"machines", "four"}, {"parallelism", 3}}},
                        {"status",
                         {{"phase", 7},
                          {"incidents", {{{"id", "one"}, {"actions", {1, "Evict"}}}, 5}},
                          {"machines", "none"},
                          {"conditions", {1, {{"type", "Ready"}, {"status", "False"}}}},
                          {"standby", nullptr}}}};
  std::ostringstream out;
  CHECK_NOTHROW(PrintJobStatus(hostile, out));
  CHECK_NOTHROW(PrintJobIncidents(hostile, out));
  const json events = {1, {{"firstTimestamp", "yesterday"}, {"reason", "Late"}},
                       {{"firstTimestamp", "2025-01-02T03:04:05Z"}, {"reason", "Early"}}};
  CHECK_NOTHROW(PrintJobTimeline(hostile, events, out));
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("phase ?"));
  CHECK_THAT(text, Catch::Contains("Ready=False"));
  CHECK_THAT(text, Catch::Contains("    - Evict\n"));
  // A time that does not parse goes after those that do.
  CHECK(text.find("Early") < text.find("Late"));
  CHECK(JobViewFromObject(json{{"metadata", {{"name", "a"}}}, {"spec", json::object()}}).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(JobViewFromObject(json{{"metadata", {{"name", "a"}}}, {"status", {{"phase", "Running"}}}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(JobViewFromObject(json::array()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("update flags become the controller's merge patch", "[unit]") {
  auto r = CodeUpdateFromFlags({{"revision", "r2"}, {"command-json", R"(["python", "a b.py"])"}, {"urgent", "true"}});
  REQUIRE(r.ok());
  CHECK(CodeUpdateMergePatch(*r, false) ==
        json::parse(R"({"spec":{"codeVersion":{"revision":"r2","command":["python","a b.py"]}},
                        "metadata":{"annotations":{"peregrine.dev/hot-update":"urgent"}}})"));
  auto lazy = CodeUpdateFromFlags({{"revision", "r3"}, {"image", "i:3"}});
  REQUIRE(lazy.ok());
  CHECK(CodeUpdateMergePatch(*lazy, false) == json::parse(R"({"spec":{"codeVersion":{"revision":"r3","image":"i:3"}}})"));
  CHECK(CodeUpdateMergePatch(*lazy, true) ==
        json::parse(R"({"spec":{"codeVersion":{"revision":"r3","image":"i:3"}},
                        "metadata":{"annotations":{"peregrine.dev/hot-update":null}}})"));
  CHECK_THAT(std::string(CodeUpdateFromFlags({{"revision", "r"}, {"command", "a"}, {"command-json", "[\"a\"]"}})
                             .status()
                             .message()),
             Catch::Contains("not both"));
  CHECK_THAT(std::string(CodeUpdateFromFlags({{"revision", "r"}, {"urgent", "maybe"}}).status().message()),
             Catch::Contains("--urgent"));
  CHECK_THAT(std::string(CodeUpdateFromFlags({{"revision", "r"}, {"command-json", "{}"}}).status().message()),
             Catch::Contains("--command-json"));
  CHECK_FALSE(CodeUpdateFromFlags({{"image", "i"}}).ok());
}

}  // namespace
}  // namespace peregrine
