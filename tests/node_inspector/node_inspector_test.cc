// The node inspector end to end against the fake API server: the real binary inspects
// real-format fixtures and writes its Node's conditions; the controller's KubeCluster
// reads them through its Node informer and AttributeNodeFindings hands them to exactly
// the jobs with pods on that Node. Also the reporter's conflict handling (the kubelet
// writing the Node between the read and the write) and the controller's reading of
// conditions (NodeFindings).
#include <sys/wait.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "controller/core/node_attribution.h"
#include "controller/core/recovery_policy.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/kube_cluster.h"
#include "controller/kube/node_findings.h"
#include "controller/kube/resources.h"
#include "controller/kube/rest_client.h"
#include "node_inspector/node_reporter.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;
using testing::FakeKubeApiServer;
using testing::TempDir;

bool Eventually(const std::function<bool()>& condition) {
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (absl::Now() < end) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

const json kReady = {{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"},
                     {"message", "kubelet is posting ready status"},
                     {"lastHeartbeatTime", "2023-11-14T22:00:00Z"}, {"lastTransitionTime", "2023-11-01T00:00:00Z"}};

void AddNode(FakeKubeApiServer& server, const std::string& name) {
  REQUIRE(server.CreateForTest("nodes", "", json{{"apiVersion", "v1"}, {"kind", "Node"},
                                                 {"metadata", {{"name", name}}}}).ok());
  REQUIRE(server.MutateStatusForTest("nodes", "", name, [](json& s) { s["conditions"] = json::array({kReady}); }).ok());
}

json Condition(FakeKubeApiServer& server, const std::string& node, const std::string& type) {
  auto n = server.GetForTest("nodes", "", node);
  REQUIRE(n.ok());
  for (const json& c : (*n)["status"].value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return json();
}

json Pod(const std::string& name, const std::string& job, const std::string& uid, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"labels", {{kJobLabel, job}}},
            {"ownerReferences", json::array({{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"},
                                              {"name", job}, {"uid", uid}, {"controller", true}}})}}},
          {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "trainer"}, {"image", "img"}}})}}},
          {"status", {{"phase", "Running"}}}};
}

TrainingJob Job(const std::string& name, const std::string& uid) {
  TrainingJob job;
  job.metadata.name = name;
  job.metadata.namespace_ = "ml";
  job.metadata.uid = uid;
  return job;
}

struct Api {
  Api() {
    REQUIRE(server.Start().ok());
    kube::Config config;
    config.server = server.base_url();
    config.bearer_token = "controller-token";
    config.source = "test";
    auto created = kube::RestClient::Create(config, {});
    REQUIRE(created.ok());
    client = *std::move(created);
  }
  FakeKubeApiServer server;
  std::unique_ptr<kube::RestClient> client;
};

int RunInspector(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {testing::BinaryPath("bin/peregrine-node-inspector")};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::ChildProcess::Options o;
  o.argv = argv;
  o.env = {{"NODE_NAME", ""}, {"KUBECONFIG", ""}};
  o.stderr_path = log;
  auto child = testing::ChildProcess::Start(o);
  REQUIRE(child != nullptr);
  std::optional<int> status = child->Wait(std::chrono::seconds(120));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  return WEXITSTATUS(*status);
}

TEST_CASE("node inspector: the binary's conditions reach exactly the jobs with pods on its node", "[integration]") {
  Api api;
  AddNode(api.server, "n1");
  AddNode(api.server, "n2");
  REQUIRE(api.server.MutateStatusForTest("nodes", "", "n2", [](json& s) {
    s["allocatable"] = {{"nvidia.com/gpu", "8"}};
  }).ok());
  TempDir dir;
  const std::string kubeconfig = dir.Write("kubeconfig", "apiVersion: v1\nkind: Config\n"
                                                         "clusters:\n- name: c\n  cluster:\n    server: " +
                                                             api.server.base_url() +
                                                             "\nusers:\n- name: u\n  user:\n    token: inspector-token\n"
                                                             "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
                                                             "current-context: x\n");
  // The node's kernel log (real format: a machine-fatal Xid 79 and a block I/O error) and
  // a sysfs with one physical NIC, up.
  dir.Write("kmsg", testing::ReadFile(testing::SourcePath("tests/agent/inspection/testdata/kmsg_xid.txt")));
  dir.Write("sys/class/net/ens1f0/device/vendor", "0x15b3\n");
  dir.Write("sys/class/net/ens1f0/operstate", "up\n");
  dir.Write("sys/class/net/ens1f0/carrier", "1\n");
  dir.Write("sys/class/net/ens1f0/carrier_changes", "2\n");
  const std::vector<std::string> common = {"--kubeconfig", kubeconfig, "--sysfs-root", dir.path() + "/sys",
                                           "--dmesg=", "--nvml-library=", "--nvidia-smi=", "--dcgmi=",
                                           "--kernel-log-lookback=-1", "--once"};
  std::vector<std::string> n1_args = {"--node", "n1", "--kmsg-path", dir.path() + "/kmsg"};
  n1_args.insert(n1_args.end(), common.begin(), common.end());
  REQUIRE(RunInspector(n1_args, dir.path() + "/n1.log") == 0);
  // n2's kernel log is clean.
  dir.Write("kmsg-n2", "6,1,1000,-;Linux version 6.1.0\n");
  std::vector<std::string> n2_args = {"--node", "n2", "--kmsg-path", dir.path() + "/kmsg-n2"};
  n2_args.insert(n2_args.end(), common.begin(), common.end());
  REQUIRE(RunInspector(n2_args, dir.path() + "/n2.log") == 0);

  INFO(testing::ReadFileIfExists(dir.path() + "/n1.log"));
  const json xid = Condition(api.server, "n1", kConditionKernelXid);
  CHECK(xid.value("status", "") == "True");
  CHECK(xid.value("reason", "") == kReasonMachineFault);
  CHECK(xid.value("message", "").find("Xid 79") != std::string::npos);
  CHECK(Condition(api.server, "n1", kConditionDisk).value("reason", "") == kReasonMachineFault);
  CHECK(Condition(api.server, "n1", kConditionNic).value("status", "") == "False");
  CHECK(Condition(api.server, "n1", kConditionGpu).value("reason", "") == kReasonNotPresent);
  CHECK(Condition(api.server, "n1", "Ready") == kReady);  // the kubelet's condition untouched
  CHECK(Condition(api.server, "n2", kConditionKernelXid).value("status", "") == "False");
  CHECK(Condition(api.server, "n2", kConditionDisk).is_null());  // no block device result at all
  // n2 has GPUs (allocatable) that this inspector cannot see: CannotSee, not NotPresent.
  CHECK(Condition(api.server, "n2", kConditionGpu).value("reason", "") == kReasonCannotSee);

  // Nothing changed: a second round writes nothing.
  const int patches = api.server.RequestCountForTest("patch", "nodes/status");
  CHECK(patches == 2);
  REQUIRE(RunInspector(n1_args, dir.path() + "/n1-again.log") == 0);
  CHECK(api.server.RequestCountForTest("patch", "nodes/status") == patches);

  // The controller's side: its informers and KubeCluster, two jobs, one pod on each node.
  // The jobs exist (the fake collects pods whose owner does not), each owning its pod.
  auto uid_of = [&](const std::string& name) {
    auto created = api.server.CreateForTest(
        "trainingjobs.peregrine.dev", "ml",
        json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"},
             {"metadata", {{"name", name}, {"namespace", "ml"}}}, {"spec", {{"machines", 1}}}});
    REQUIRE(created.ok());
    return (*created)["metadata"]["uid"].get<std::string>();
  };
  const std::string uid_a = uid_of("a");
  const std::string uid_b = uid_of("b");
  REQUIRE(api.server.CreateForTest("pods", "ml", Pod("a-0", "a", uid_a, "n1")).ok());
  REQUIRE(api.server.CreateForTest("pods", "ml", Pod("b-0", "b", uid_b, "n2")).ok());
  ManualClock clock;
  SeededRandom random{7};
  kube::InformerOptions pods_options;
  pods_options.resource = PodsPath("");
  kube::Informer pods(api.client.get(), pods_options, &clock, &random);
  pods.AddIndex(kPodsByJobIndex, PodJobIndex);
  kube::InformerOptions nodes_options;
  nodes_options.resource = NodesPath();
  kube::Informer nodes(api.client.get(), nodes_options, &clock, &random);
  kube::EventRecorder events(api.client.get(), kube::EventRecorderOptions{}, &clock);
  pods.Start();
  nodes.Start();
  REQUIRE(Eventually([&] { return pods.HasSynced() && nodes.HasSynced(); }));
  KubeCluster cluster(api.client.get(), &pods, &nodes, &events, KubeClusterOptions{}, [] { return true; });

  auto observe = [&](const TrainingJob& job, const std::string& pod) {
    JobObservation obs;
    auto listed = cluster.ListPods(job);
    REQUIRE(listed.ok());
    obs.pods = *listed;
    AgentObservation agent;
    agent.pod = pod;
    agent.machine_id = obs.pods.empty() ? "" : obs.pods[0].machine_id;
    agent.connected = true;
    obs.agents = {agent};
    AttributeNodeFindings(&obs);
    return obs;
  };
  REQUIRE(Eventually([&] {
    auto listed = cluster.ListPods(Job("a", uid_a));
    return listed.ok() && listed->size() == 1;
  }));
  JobObservation a = observe(Job("a", uid_a), "a-0");
  JobObservation b = observe(Job("b", uid_b), "b-0");
  REQUIRE(b.pods.size() == 1);
  CHECK(a.pods[0].machine_id == "n1");
  CHECK(a.pods[0].node_findings.size() == 2);  // the Xid and the disk; the NIC and GPU are fine
  std::optional<std::string> fault = MachineAttributedFault(a.agents[0]);
  REQUIRE(fault.has_value());
  CHECK(fault->find("node/PeregrineKernelXid") != std::string::npos);
  // Job B's node has only the GPU that cannot be seen: reported, never acted on.
  REQUIRE(b.pods[0].node_findings.size() == 1);
  CHECK(b.pods[0].node_findings[0].status == InspectionStatus::kCannotSee);
  CHECK_FALSE(MachineAttributedFault(b.agents[0]).has_value());
  CHECK(b.agents[0].alarms.empty());
  for (const InspectionObservation& i : b.agents[0].inspections) CHECK(i.kind == "gpu");
  pods.Stop();
  nodes.Stop();
}

TEST_CASE("node inspector: a conflicting write of the Node is read again, the kubelet's condition kept", "[integration]") {
  Api api;
  AddNode(api.server, "n1");
  NodeReporter reporter(api.client.get(), NodeReporterOptions{"n1", absl::Minutes(5), 5});
  api.server.InterleaveWriteForTest("patch", "nodes/status", 1);
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  REQUIRE(reporter.Report({{kConditionGpu, "True", kReasonWarning, "gpu2: hw_thermal"}}, now).ok());
  CHECK(reporter.writes() == 1);
  CHECK(api.server.RequestCountForTest("patch", "nodes/status") == 2);  // one 409, one write
  CHECK(Condition(api.server, "n1", kConditionGpu).value("message", "") == "gpu2: hw_thermal");
  CHECK(Condition(api.server, "n1", "Ready") == kReady);
  // A Node that does not exist: the client's NotFound, nothing written.
  NodeReporter missing(api.client.get(), NodeReporterOptions{"nope", absl::Minutes(5), 5});
  CHECK(absl::IsNotFound(missing.Report({{kConditionGpu, "True", kReasonWarning, "x"}}, now)));
}

TEST_CASE("node findings: conditions read back as inspection observations, bad entries ignored", "[unit]") {
  const json node = {
      {"status",
       {{"conditions",
         json::array({kReady,
                      {{"type", kConditionKernelXid}, {"status", "True"}, {"reason", kReasonMachineFault},
                       {"message", "PCI:0000:db:00: Xid 79"}, {"lastTransitionTime", "2023-11-14T22:13:20Z"}},
                      {{"type", kConditionNic}, {"status", "True"}, {"reason", kReasonWarning}, {"message", "ens1: flap"}},
                      {{"type", kConditionGpu}, {"status", "Unknown"}, {"reason", kReasonCannotSee}, {"message", "dcgm"}},
                      {{"type", kConditionDisk}, {"status", "False"}, {"reason", kReasonNoProblem}},
                      {{"type", "PeregrineFuture"}, {"status", "True"}},
                      "garbage", {{"type", 7}}})}}}};
  const std::vector<InspectionObservation> f = NodeFindings(node);
  REQUIRE(f.size() == 3);
  CHECK(f[0].kind == "xid");
  CHECK(f[0].status == InspectionStatus::kFault);
  CHECK(f[0].machine_attributed);
  CHECK(f[0].at == 1700000000LL * 1000000000LL);
  CHECK(f[0].summary == "node inspector: PCI:0000:db:00: Xid 79");
  CHECK(f[1].kind == "network");
  CHECK(f[1].status == InspectionStatus::kWarning);
  CHECK_FALSE(f[1].machine_attributed);
  CHECK(f[1].at == 0);
  CHECK(f[2].status == InspectionStatus::kCannotSee);
  CHECK(NodeFindings(json()).empty());
  CHECK(NodeFindings(json{{"status", "x"}}).empty());
}

}  // namespace
}  // namespace peregrine
