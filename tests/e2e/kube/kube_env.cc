#include "tests/e2e/kube/kube_env.h"

#include <catch2/catch.hpp>

#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/status_json.h"

namespace peregrine::e2e {

json JobManifest(const JobManifestParams& p) {
  return json{
      {"apiVersion", "peregrine.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", p.name}, {"namespace", p.ns}}},
      {"spec",
       {{"machines", p.machines},
        {"gpusPerMachine", 1},
        {"parallelism", {{"tensor", 1}, {"pipeline", 1}, {"data", p.data_parallel < 0 ? p.machines : p.data_parallel}}},
        {"codeVersion", {{"image", "example.com/train:1"}, {"command", json::array({"python", "train.py"})}}},
        {"template",
         {{"metadata", {{"labels", {{"team", "ml"}}}}},
          {"spec", {{"containers", json::array({json{{"name", "trainer"}, {"image", "example.com/train:1"}}})}}}}},
        {"standby", {{"min", p.standbys}, {"max", p.standbys}}},
        {"faultTolerance", {{"restartGraceSeconds", 1}}}}}};
}

json JobManifest(const std::string& name, int machines) {
  return JobManifest(JobManifestParams{.name = name, .machines = machines});
}

Env::Env()
    : agent_key_file(
          key_dir.Write("agent.key", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n")) {
  for (const auto& [plural, kind] : {std::pair{"secrets", "Secret"}, std::pair{"configmaps", "ConfigMap"}}) {
    testing::KubeResourceType type;
    type.version = "v1";
    type.plural = plural;
    type.kind = kind;
    server.RegisterResource(type);
  }
  // peregrinectl's token: TrainingJobs in kNs (the API checks it with the API server).
  testing::FakeTokenIdentity ctl;
  ctl.username = "e2e-user";
  server.auth().AddToken(kCtlToken, ctl);
  testing::FakeAccessRule rule;
  rule.users = {"e2e-user"};
  rule.verbs = {"get", "list", "update"};
  rule.api_groups = {"peregrine.dev"};
  rule.resources = {"trainingjobs"};
  rule.namespace_name = kNs;
  server.auth().AddRule(rule);
  REQUIRE(server.Start().ok());
  config.server = server.base_url();
  config.source = "test";
  auto c = kube::RestClient::Create(config);
  REQUIRE(c.ok());
  client = *std::move(c);
}

Env::~Env() {
  if (kubelet) kubelet->Stop();
  for (auto& m : modes) {
    if (m) m->Shutdown();
  }
  server.Stop();
}

KubeModeOptions Env::Options(const std::string& identity, bool leader_elect) {
  KubeModeOptions o;
  o.watch_namespace = kNs;
  o.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  o.agent_image = "example.com/peregrine-agent:test";
  o.host = "127.0.0.1";
  o.grpc_port = 0;
  o.http_port = 0;
  o.metrics_port = 0;
  o.heartbeat_ms = 100;
  o.resync = absl::Seconds(2);
  o.identity = identity;
  o.agent_key_file = agent_key_file;
  o.decision.triage_window_ns = 300'000'000;
  if (leader_elect) {
    o.leader_elect = true;
    o.lease_namespace = kNs;
    o.lease_duration = absl::Seconds(3);
    o.renew_deadline = absl::Seconds(2);
    o.retry_period = absl::Milliseconds(300);
  }
  if (tweak_options) tweak_options(o);
  return o;
}

KubeMode* Env::StartController(const std::string& identity, bool leader_elect) {
  auto m = KubeMode::Start(config, Options(identity, leader_elect));
  REQUIRE(m.ok());
  modes.push_back(*std::move(m));
  return modes.back().get();
}

std::string Env::Target() {
  for (auto& m : modes) {
    if (m && m->IsLeader()) return absl::StrCat("127.0.0.1:", m->grpc_port());
  }
  return "127.0.0.1:1";
}

void Env::StartKubelet() {
  kubelet = std::make_unique<FakeKubelet>(&server, client.get(), kNs, [this] { return Target(); }, &script);
}

void Env::Submit(const json& manifest) {
  REQUIRE(server.CreateForTest(kJobs, manifest["metadata"]["namespace"].get<std::string>(), manifest).ok());
}

std::optional<JobStatus> Env::Status(const std::string& name) {
  auto obj = server.GetForTest(kJobs, kNs, name);
  if (!obj.ok() || !obj->contains("status") || !(*obj)["status"].contains("phase")) return std::nullopt;
  auto st = JobStatusFromJson((*obj)["status"].dump());
  if (!st.ok()) return std::nullopt;
  return *st;
}

bool Env::WaitStatus(const std::string& name, const std::function<bool(const JobStatus&)>& pred,
                     absl::Duration deadline) {
  return Eventually([&] {
    auto st = Status(name);
    return st.has_value() && pred(*st);
  }, deadline);
}

std::string Env::Uid(const std::string& resource, const std::string& name) {
  auto obj = server.GetForTest(resource, resource == "nodes" ? "" : kNs, name);
  return obj.ok() ? (*obj)["metadata"].value("uid", "") : "";
}

std::function<bool(const JobStatus&)> RunningWithStandby(uint64_t step) {
  return [step](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.last_completed_step >= step && st.standby_ready == 1;
  };
}

KubeMode* RunJob(Env& env, const std::string& name, int machines, uint64_t step) {
  KubeMode* mode = env.StartController();
  env.StartKubelet();
  env.Submit(JobManifest(name, machines));
  REQUIRE(env.WaitStatus(name, RunningWithStandby(step)));
  return mode;
}

}  // namespace peregrine::e2e
