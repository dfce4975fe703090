// The kube e2e suite's environment: a FakeKubeApiServer, a RestClient to it, KubeMode
// controllers (replicas) started on it, and the FakeKubelet of harness.h playing the
// scheduler, the kubelets and the agents; plus the TrainingJob manifest the tests submit.
//
// Env owns everything it starts and tears it all down in its destructor (kubelet, then
// controllers, then the API server), also when an assertion fails. Its setup steps
// REQUIRE success (Catch2), so it is for use inside a TEST_CASE only. Not thread-safe:
// one test thread drives it (the controllers and the kubelet run their own threads).
#ifndef PEREGRINE_TESTS_E2E_KUBE_KUBE_ENV_H_
#define PEREGRINE_TESTS_E2E_KUBE_KUBE_ENV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "controller/core/job_state.h"
#include "controller/kube/config.h"
#include "controller/kube/kube_mode.h"
#include "controller/kube/rest_client.h"
#include "tests/e2e/kube/harness.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::e2e {

inline constexpr char kNs[] = "train";  // the namespace the controller watches
inline constexpr char kJobs[] = "trainingjobs.peregrine.dev";
// peregrinectl's bearer token: get, list and update TrainingJobs in kNs.
inline constexpr char kCtlToken[] = "e2e-ctl-token";

// What varies between the tests' TrainingJobs; the rest of the manifest is fixed (one GPU
// per machine, tensor and pipeline parallelism 1, image example.com/train:1 running
// `python train.py`, pod template labelled team=ml, restartGraceSeconds 1).
struct JobManifestParams {
  std::string ns = kNs;
  std::string name;
  int machines = 1;
  int data_parallel = -1;  // -1: the number of machines
  int standbys = 1;        // the warm pool's size (standby.min = standby.max)
};

json JobManifest(const JobManifestParams& params);
// A job in kNs with one standby, data parallel across its machines.
json JobManifest(const std::string& name, int machines);

struct Env {
  // Starts the API server (with Secrets, ConfigMaps and kCtlToken's access rule) and the
  // client; REQUIREs both succeed.
  Env();
  ~Env();

  // The controller's options: watches kNs, binds loopback port 0 for gRPC, HTTP and
  // metrics, 100 ms heartbeats, a 2 s resync, agents authenticated with the agent key,
  // and, with leader_elect, a Lease in kNs (3 s duration, 2 s renew deadline, 300 ms
  // retries); tweak_options, when set, has the last word.
  KubeModeOptions Options(const std::string& identity, bool leader_elect);
  // Starts one more controller replica; REQUIREs that it starts. Owned by the Env.
  KubeMode* StartController(const std::string& identity = "replica-a", bool leader_elect = false);
  // The gRPC address of the replica that leads now (what the leader-only Service does);
  // a closed port when none does.
  std::string Target();
  // Starts the kubelet for kNs; its agents dial Target().
  void StartKubelet();

  // Creates the TrainingJob in the namespace its manifest names; REQUIREs success.
  void Submit(const json& manifest);
  // The status of TrainingJob kNs/name, or nullopt while it has none (or it is gone).
  std::optional<JobStatus> Status(const std::string& name);
  // Waits until kNs/name has a status satisfying pred; false after the deadline.
  bool WaitStatus(const std::string& name, const std::function<bool(const JobStatus&)>& pred,
                  absl::Duration deadline = absl::Seconds(90));
  // metadata.uid of the object (nodes are cluster-scoped, the rest in kNs); "" if absent.
  std::string Uid(const std::string& resource, const std::string& name);

  std::function<void(KubeModeOptions&)> tweak_options;  // set before StartController
  testing::TempDir key_dir{"peregrine-e2e-key"};
  const std::string agent_key_file;
  testing::FakeKubeApiServer server;
  kube::Config config;
  std::unique_ptr<kube::RestClient> client;
  TrainingScript script;
  std::vector<std::unique_ptr<KubeMode>> modes;
  std::unique_ptr<FakeKubelet> kubelet;
};

// The job is Running with step `step` completed and its one standby ready.
std::function<bool(const JobStatus&)> RunningWithStandby(uint64_t step);

// Starts a controller (replica-a) and the kubelet, submits job `name` of `machines`
// machines (JobManifest) and REQUIREs that it runs past step `step` with its standby
// ready; returns the controller.
KubeMode* RunJob(Env& env, const std::string& name, int machines, uint64_t step);

}  // namespace peregrine::e2e

#endif  // PEREGRINE_TESTS_E2E_KUBE_KUBE_ENV_H_
