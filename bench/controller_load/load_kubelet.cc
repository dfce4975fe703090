#include "bench/controller_load/load_kubelet.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/kube/resources.h"

namespace peregrine::loadtest {

using nlohmann::json;

LoadKubelet::LoadKubelet(testing::FakeKubeApiServer* server, AgentFleet* fleet, std::string ns)
    : server_(server), fleet_(fleet), ns_(std::move(ns)), thread_([this] { Loop(); }) {}

LoadKubelet::~LoadKubelet() { Stop(); }

void LoadKubelet::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LoadKubelet::OnWrite(const testing::FakeKubeApiServer::WriteRecord& w) {
  if (w.resource != "pods" || w.response == nullptr) return;
  PodEvent e;
  if (w.verb == "create" && w.code == 201) {
    const json meta = w.response->value("metadata", json::object());
    if (meta.value("namespace", "") != ns_) return;
    e.created = true;
    e.name = meta.value("name", "");
    e.uid = meta.value("uid", "");
    const json labels = meta.value("labels", json::object());
    e.standby = labels.value(kRoleLabel, "") == "standby";
    e.job = labels.value(kJobLabel, "");
  } else if (w.verb == "delete" && w.code == 200) {
    e.name = w.name;
  } else {
    return;
  }
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(e));
}

absl::Status LoadKubelet::FailMachine(const std::string& pod) {
  fleet_->Remove(pod);
  return server_->SetPodPhaseForTest(ns_, pod, "Failed");
}

int LoadKubelet::PodsStarted() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

std::vector<std::string> LoadKubelet::Errors() const {
  absl::MutexLock lock(&mu_);
  return errors_;
}

void LoadKubelet::Loop() {
  for (;;) {
    std::deque<PodEvent> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !events_.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      if (stop_) return;
      batch.swap(events_);
    }
    for (const PodEvent& e : batch) {
      if (e.created) {
        StartPod(e);
      } else {
        fleet_->Remove(e.name);  // false when the pod never ran (or its machine was lost)
      }
    }
  }
}

void LoadKubelet::StartPod(const PodEvent& pod) {
  int n;
  {
    absl::MutexLock lock(&mu_);
    n = next_node_++;
  }
  const std::string node = absl::StrCat("node-", n);
  const std::string pod_ip = absl::StrCat("10.", 1 + n / 65536, ".", (n / 256) % 256, ".", n % 256);
  auto fail = [&](const std::string& what, const absl::Status& s) {
    absl::MutexLock lock(&mu_);
    errors_.push_back(absl::StrCat(pod.name, ": ", what, ": ", s.ToString()));
  };
  json node_obj = {{"apiVersion", "v1"},
                   {"kind", "Node"},
                   {"metadata", {{"name", node}}},
                   {"status",
                    {{"conditions", json::array({json{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}})},
                     {"addresses", json::array({json{{"type", "InternalIP"}, {"address", pod_ip}}})}}}};
  if (auto created = server_->CreateForTest("nodes", "", node_obj); !created.ok()) return fail("create node", created.status());
  // The scheduler's binding and the kubelet's first status, in one write.
  absl::Status bound = server_->MutateObjectForTest("pods", ns_, pod.name, [&](json& p) {
    p["spec"]["nodeName"] = node;
    json& st = p["status"];
    st["phase"] = "Running";
    st["podIP"] = pod_ip;
    st["podIPs"] = json::array({json{{"ip", pod_ip}}});
    st["hostIP"] = pod_ip;
    st["conditions"] = json::array({json{{"type", "Ready"}, {"status", "True"}}});
  });
  if (absl::IsNotFound(bound)) return;  // deleted before it ran
  if (!bound.ok()) return fail("bind and run", bound);
  // As the kubelet does: the pod's projected service-account token for peregrine.dev,
  // bound to this pod (the API server's TokenReview names the pod and its uid).
  const std::string token = absl::StrCat("sa-token-", pod.name, "-", pod.uid);
  server_->auth().AddBoundServiceAccountToken(token, ns_, "default", pod.name, pod.uid, {"peregrine.dev"});
  absl::Status added = fleet_->Add(SimulatedAgentParams{ns_, pod.job, pod.name, node, token, pod.standby});
  if (!added.ok()) return fail("start agent", added);
  absl::MutexLock lock(&mu_);
  ++started_;
}

}  // namespace peregrine::loadtest
