// Test harness for the operator against FakeKubeApiServer. The test plays the parts of a
// cluster that the controller does not own:
//   - the scheduler and the kubelet (FakeKubelet): every pod the controller creates is
//     bound to a fresh node (a Node object, Ready=True), marked Running, and its agent is
//     started; a pod that is deleted has its agent stopped;
//   - the agents (TestAgent): real gRPC bidi streams on loopback to the controller's
//     AgentService, speaking peregrine.v1 like peregrine-agent does (register with the
//     pod's bound service-account token, which the kubelet here issues through the fake
//     API server's TokenReview, then with the credential the ack carried; heartbeats
//     with per-rank steps, command results, re-register after a broken stream). "Training" advances one step per heartbeat up
//     to a target step, then reports SUCCEEDED.
// Why in-test agents and not peregrine-agent processes: the 100-machine case needs 100+
// agents on a loaded 2-core machine, and the pods' rendezvous names
// (<pod>.<job>.<ns>.svc) do not resolve outside a cluster, so real training could not
// start anyway; the agent's own behaviour is covered by the agent and local e2e suites.
#ifndef PEREGRINE_TESTS_E2E_KUBE_HARNESS_H_
#define PEREGRINE_TESTS_E2E_KUBE_HARNESS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "controller/kube/informer.h"
#include "controller/kube/rest_client.h"
#include "controller/kube/kube_cluster.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/eventually.h"

namespace peregrine::e2e {

using nlohmann::json;

// The kit's Eventually with this suite's deadline, far beyond any healthy run (the
// 100-machine case shares a loaded machine with 100+ gRPC streams).
inline bool Eventually(const std::function<bool()>& condition, absl::Duration deadline = absl::Seconds(90)) {
  return testing::Eventually(condition, deadline, absl::Milliseconds(10));
}

// Shared knobs of the simulated training.
struct TrainingScript {
  std::atomic<uint64_t> finish_step{1000000};  // report SUCCEEDED once this step is done
  std::atomic<bool> progress{true};            // advance a step per heartbeat
};

class TestAgent {
 public:
  struct Params {
    std::string ns, job, pod, machine_id, token;
    bool standby = false;
  };
  TestAgent(Params params, std::function<std::string()> target, TrainingScript* script)
      : params_(std::move(params)), target_(std::move(target)), script_(script) {
    role_active_ = !params_.standby;
    thread_ = std::thread([this] { Run(); });
  }
  ~TestAgent() { Stop(); }

  void Stop() {
    stop_.store(true);
    {
      absl::MutexLock lock(&mu_);
      if (context_) context_->TryCancel();
    }
    if (thread_.joinable()) thread_.join();
  }
  // Breaks the current stream (the agent re-registers on a new one, maybe to a new target).
  void Reconnect() {
    absl::MutexLock lock(&mu_);
    if (context_) context_->TryCancel();
  }
  uint64_t attempt() {
    absl::MutexLock lock(&mu_);
    return attempt_;
  }
  bool connected() { return connected_.load(); }
  const std::string& pod() const { return params_.pod; }

 private:
  v1::TrainingState TrainingLocked() {
    v1::TrainingState t;
    t.set_phase(phase_);
    t.set_attempt(attempt_);
    return t;
  }

  void BeginAttemptLocked(const v1::Assignment& a) {
    if (a.attempt() == 0 || a.attempt() == attempt_) return;
    assignment_ = a;
    attempt_ = a.attempt();
    step_ = a.resume_step();
    phase_ = v1::TRAINING_PHASE_RUNNING;
    role_active_ = true;
  }

  void Write(grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>* stream, const v1::AgentMessage& m) {
    absl::MutexLock lock(&write_mu_);
    stream->Write(m);
  }

  void Run() {
    while (!stop_.load()) {
      auto channel = grpc::CreateChannel(target_(), grpc::InsecureChannelCredentials());
      auto stub = v1::AgentService::NewStub(channel);
      auto context = std::make_unique<grpc::ClientContext>();
      {
        // The pod's bootstrap token until an ack gave the agent its credential.
        absl::MutexLock lock(&mu_);
        context->AddMetadata("authorization", absl::StrCat("Bearer ", credential_.empty() ? params_.token : credential_));
      }
      {
        absl::MutexLock lock(&mu_);
        context_ = context.get();
      }
      if (stop_.load()) break;
      auto stream = stub->Connect(context.get());
      v1::AgentMessage reg_msg;
      {
        absl::MutexLock lock(&mu_);
        v1::Register* reg = reg_msg.mutable_register_();
        reg->set_job_namespace(params_.ns);
        reg->set_job_name(params_.job);
        reg->set_pod_name(params_.pod);
        reg->set_machine_id(params_.machine_id);
        reg->set_role(role_active_ ? v1::AGENT_ROLE_ACTIVE : v1::AGENT_ROLE_STANDBY);
        if (attempt_ > 0) *reg->mutable_assignment() = assignment_;
        *reg->mutable_training() = TrainingLocked();
        for (const std::string& id : executed_) reg->add_executed_command_ids(id);
        reg->mutable_self_check()->set_passed(true);
      }
      Write(stream.get(), reg_msg);
      std::atomic<bool> done{false};
      std::thread heartbeats([&] {
        while (!done.load() && !stop_.load()) {
          absl::SleepFor(absl::Milliseconds(100));
          if (!connected_.load()) continue;
          v1::AgentMessage hb;
          {
            absl::MutexLock lock(&mu_);
            if (phase_ == v1::TRAINING_PHASE_RUNNING && script_->progress.load()) {
              if (step_ < script_->finish_step.load()) ++step_;
              if (step_ >= script_->finish_step.load()) phase_ = v1::TRAINING_PHASE_SUCCEEDED;
            }
            *hb.mutable_heartbeat()->mutable_training() = TrainingLocked();
            if (attempt_ > 0) {
              for (const v1::RankInfo& r : assignment_.ranks()) {
                v1::IterationSummary* it = hb.mutable_heartbeat()->add_iterations();
                it->set_global_rank(r.global_rank());
                it->set_last_completed_step(step_);
                it->set_mean_iteration_seconds(0.1);
              }
            }
          }
          Write(stream.get(), hb);
        }
      });
      v1::ControllerMessage in;
      while (stream->Read(&in)) {
        if (in.has_register_ack()) {
          connected_.store(true);
          absl::MutexLock lock(&mu_);
          if (!in.register_ack().agent_credential().empty()) credential_ = in.register_ack().agent_credential();
          if (in.register_ack().role() == v1::AGENT_ROLE_ACTIVE) BeginAttemptLocked(in.register_ack().assignment());
        } else if (in.has_command()) {
          const v1::Command& c = in.command();
          {
            absl::MutexLock lock(&mu_);
            if (c.has_restart_in_place()) BeginAttemptLocked(c.restart_in_place().assignment());
            if (c.has_activate()) BeginAttemptLocked(c.activate().assignment());
            if (c.has_stop()) phase_ = v1::TRAINING_PHASE_EXITED;
            executed_.push_back(c.id());
          }
          v1::AgentMessage result;
          result.mutable_command_result()->set_command_id(c.id());
          Write(stream.get(), result);
        }
      }
      done.store(true);
      connected_.store(false);
      heartbeats.join();
      {
        absl::MutexLock lock(&write_mu_);
        stream->WritesDone();
      }
      (void)stream->Finish();
      {
        absl::MutexLock lock(&mu_);
        context_ = nullptr;
      }
      for (int i = 0; i < 5 && !stop_.load(); ++i) absl::SleepFor(absl::Milliseconds(20));
    }
  }

  const Params params_;
  const std::function<std::string()> target_;
  TrainingScript* const script_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  absl::Mutex write_mu_;
  absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool role_active_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  std::string credential_ ABSL_GUARDED_BY(mu_);  // from the last RegisterAck that had one
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  v1::TrainingPhase phase_ ABSL_GUARDED_BY(mu_) = v1::TRAINING_PHASE_IDLE;
  v1::Assignment assignment_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> executed_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The scheduler + kubelet: binds new pods to fresh Ready nodes, runs them (starts their
// agents) and stops the agents of deleted pods. Reads pods through its own informer.
class FakeKubelet {
 public:
  FakeKubelet(testing::FakeKubeApiServer* server, kube::RestClient* client, std::string ns,
              std::function<std::string()> controller_target, TrainingScript* script)
      : server_(server), client_(client), ns_(std::move(ns)), target_(std::move(controller_target)), script_(script) {
    kube::InformerOptions opts;
    opts.resource = PodsPath(ns_);
    informer_ = std::make_unique<kube::Informer>(client_, opts, RealClock(), &random_);
    informer_->Start();
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeKubelet() { Stop(); }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    informer_->Stop();
    absl::MutexLock lock(&mu_);
    for (auto& [name, agent] : agents_) agent->Stop();
    agents_.clear();
  }

  // The machine of `pod` dies: its agent stops and the pod fails.
  bool KillPod(const std::string& pod) {
    std::unique_ptr<TestAgent> agent;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = agents_.find(pod); it != agents_.end()) {
        agent = std::move(it->second);
        agents_.erase(it);
      }
    }
    if (agent) agent->Stop();
    return server_->SetPodPhaseForTest(ns_, pod, "Failed").ok();
  }
  // The training container of `pod` is OOMKilled: its agent stops and, in one status write
  // as the kubelet makes it, the pod is Failed with the container terminated OOMKilled
  // (exit code 137). The node stays Ready.
  bool OomKillPod(const std::string& pod) {
    std::unique_ptr<TestAgent> agent;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = agents_.find(pod); it != agents_.end()) {
        agent = std::move(it->second);
        agents_.erase(it);
      }
    }
    if (agent) agent->Stop();
    return server_
        ->MutateStatusForTest("pods", ns_, pod,
                              [](json& status) {
                                status["phase"] = "Failed";
                                status["containerStatuses"] = json::array(
                                    {json{{"name", "trainer"},
                                          {"ready", false},
                                          {"state", {{"terminated", {{"reason", "OOMKilled"}, {"exitCode", 137}}}}}}});
                              })
        .ok();
  }
  // The node of `pod` goes NotReady (its kubelet stops posting status): the agent on it
  // falls silent and the pod's phase stays what it was, as on a real cluster.
  bool NodeDown(const std::string& pod) {
    std::unique_ptr<TestAgent> agent;
    std::string node;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = agents_.find(pod); it != agents_.end()) {
        agent = std::move(it->second);
        agents_.erase(it);
      }
      if (auto it = nodes_.find(pod); it != nodes_.end()) node = it->second;
    }
    if (agent) agent->Stop();
    return !node.empty() && server_->SetNodeReadyForTest(node, false).ok();
  }
  void ReconnectAll() {
    absl::MutexLock lock(&mu_);
    for (auto& [name, agent] : agents_) agent->Reconnect();
  }
  std::vector<std::string> RunningPods() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (auto& [name, agent] : agents_) out.push_back(name);
    return out;
  }
  int ConnectedAgents() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (auto& [name, agent] : agents_) n += agent->connected() ? 1 : 0;
    return n;
  }
  std::string NodeOf(const std::string& pod) {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(pod);
    return it == nodes_.end() ? "" : it->second;
  }
  // The pod `name`, whenever it is created, stays Pending with this status (what the
  // kubelet or the scheduler reports: an image pull in back-off, no node fits) instead
  // of running; Unstick lets it run.
  void StickPod(const std::string& name, json status) {
    absl::MutexLock lock(&mu_);
    stuck_[name] = std::move(status);
  }
  void Unstick(const std::string& name) {
    absl::MutexLock lock(&mu_);
    stuck_.erase(name);
    started_.erase(name);  // the loop starts it now
  }
  // Errors found in pods the controller built (agent injection), empty when none.
  std::vector<std::string> PodErrors() {
    absl::MutexLock lock(&mu_);
    return pod_errors_;
  }

 private:
  static std::string CheckInjected(const json& pod) {
    const json& c = pod["spec"]["containers"][0];
    const json& cmd = c["command"];
    if (!cmd.is_array() || cmd.size() < 11 || cmd[0] != "/peregrine/bin/peregrine-agent") return "agent command";
    if (cmd[9] != "--machine-id" || cmd[10] != "$(NODE_NAME)") return "machine id";
    bool node_env = false, credential_env = false;
    for (const json& e : c["env"]) {
      node_env = node_env || (e["name"] == "NODE_NAME" && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName");
      credential_env = credential_env || e["name"] == "PEREGRINE_CREDENTIAL_FILE";
      if (e["name"] == "PEREGRINE_TOKEN_FILE") return "a token file in the training container";
    }
    if (!node_env || !credential_env) return "env";
    if (pod["spec"]["initContainers"][0]["name"] != "peregrine-agent-install") return "init container";
    // The service-account token reaches the credential init container only.
    for (const json& m : c.value("volumeMounts", json::array())) {
      if (m["name"] == "peregrine-agent-token") return "service-account token mounted in the training container";
    }
    if (pod["spec"]["initContainers"][1]["name"] != "peregrine-agent-credential") return "credential init container";
    const json& owner = pod["metadata"]["ownerReferences"][0];
    if (owner["kind"] != "TrainingJob" || owner["controller"] != true || owner["blockOwnerDeletion"] != true) {
      return "owner reference";
    }
    if (pod["spec"]["subdomain"] != pod["metadata"]["labels"]["peregrine.dev/job"]) return "subdomain";
    if (pod["spec"]["hostname"] != pod["metadata"]["name"]) return "hostname";
    return "";
  }

  void StartPod(const json& pod) {
    const std::string name = pod["metadata"]["name"];
    const std::string job = pod["metadata"]["labels"]["peregrine.dev/job"];
    if (std::string err = CheckInjected(pod); !err.empty()) {
      absl::MutexLock lock(&mu_);
      pod_errors_.push_back(absl::StrCat(name, ": ", err));
    }
    std::optional<json> stuck;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = stuck_.find(name); it != stuck_.end()) stuck = it->second;
    }
    if (stuck.has_value()) {
      (void)server_->MutateStatusForTest("pods", ns_, name, [&](json& status) { status = *stuck; });
      return;
    }
    const std::string node = absl::StrCat("node-", next_node_++);
    json node_obj = {{"apiVersion", "v1"},
                     {"kind", "Node"},
                     {"metadata", {{"name", node}}},
                     {"status", {{"conditions", json::array({json{{"type", "Ready"}, {"status", "True"}}})}}}};
    if (!server_->CreateForTest("nodes", "", node_obj).ok()) return;
    if (!client_->MergePatch(PodsPath(ns_), name, json{{"spec", {{"nodeName", node}}}}).ok()) return;
    if (!server_->SetPodPhaseForTest(ns_, name, "Running").ok()) return;
    // As the kubelet does: the pod's projected service-account token for peregrine.dev,
    // bound to this pod (the API server's TokenReview names the pod and its uid).
    const std::string pod_uid = pod["metadata"].value("uid", "");
    const std::string token = absl::StrCat("sa-token-", name, "-", pod_uid);
    server_->auth().AddBoundServiceAccountToken(token, ns_, "default", name, pod_uid, {"peregrine.dev"});
    const json& cmd = pod["spec"]["containers"][0]["command"];
    TestAgent::Params p{ns_, job, name, node, token, cmd.size() > 8 && cmd[8] == "standby"};
    auto agent = std::make_unique<TestAgent>(p, target_, script_);
    absl::MutexLock lock(&mu_);
    nodes_[name] = node;
    agents_[name] = std::move(agent);
  }

  void Loop() {
    while (!stop_.load()) {
      absl::SleepFor(absl::Milliseconds(10));
      if (!informer_->HasSynced()) continue;
      // Pods are told apart by uid, as the kubelet does: a pod deleted and created again
      // under the same name between two passes (a suspended job resumed, on a loaded
      // machine) is a new pod whose old agent must stop and whose new one must start.
      std::map<std::string, std::string> live;  // name -> uid
      std::vector<kube::ObjectPtr> to_start;
      std::vector<std::unique_ptr<TestAgent>> gone;
      for (const kube::ObjectPtr& pod : informer_->List()) {
        const std::string name = (*pod)["metadata"]["name"];
        const bool deleting = (*pod)["metadata"].contains("deletionTimestamp");
        if (deleting) continue;
        const std::string uid = (*pod)["metadata"].value("uid", "");
        live[name] = uid;
        absl::MutexLock lock(&mu_);
        auto started = started_.find(name);
        if (started != started_.end() && started->second == uid) continue;
        if (auto it = agents_.find(name); it != agents_.end()) {
          gone.push_back(std::move(it->second));
          agents_.erase(it);
        }
        started_[name] = uid;
        to_start.push_back(pod);
      }
      {
        absl::MutexLock lock(&mu_);
        for (auto it = agents_.begin(); it != agents_.end();) {
          if (!live.count(it->first)) {
            gone.push_back(std::move(it->second));
            it = agents_.erase(it);
          } else {
            ++it;
          }
        }
        // A deleted pod may come back under the same name later: forget it.
        for (auto it = started_.begin(); it != started_.end();) {
          it = live.count(it->first) ? std::next(it) : started_.erase(it);
        }
      }
      for (auto& a : gone) a->Stop();
      for (const kube::ObjectPtr& pod : to_start) StartPod(*pod);
    }
  }

  testing::FakeKubeApiServer* const server_;
  kube::RestClient* const client_;
  const std::string ns_;
  const std::function<std::string()> target_;
  TrainingScript* const script_;
  SeededRandom random_{7};
  std::unique_ptr<kube::Informer> informer_;
  std::atomic<bool> stop_{false};
  int next_node_ = 0;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<TestAgent>> agents_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> started_ ABSL_GUARDED_BY(mu_);  // name -> uid of the pod started
  std::map<std::string, json> stuck_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> pod_errors_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace peregrine::e2e

#endif  // PEREGRINE_TESTS_E2E_KUBE_HARNESS_H_
