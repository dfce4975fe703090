// LoadKubelet: the scheduler and the kubelets of a simulated cluster for the controller
// load test, played on a FakeKubeApiServer in the same process.
//
// Every pod the controller creates (seen through the server's write observer, which the
// owner forwards to OnWrite) is bound to a fresh Node (Ready) and reported Running with a
// pod IP in one write, as a scheduler and kubelet would; the kubelet's projected
// service-account token for the pod is registered with the server's TokenReview; then the
// pod's simulated agent joins the AgentFleet. A pod the controller deletes loses its
// agent. FailMachine is a lost machine: its agent's stream ends and its pod fails.
// The kubelet writes through the server's in-process hooks, not HTTP, so every HTTP
// request the server counts is the controller's.
//
// Thread-safe. OnWrite runs under the server's lock: it only queues. Stop() (also run by
// the destructor) joins the kubelet thread; the server and the fleet must outlive it.
#ifndef PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_KUBELET_H_
#define PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_KUBELET_H_

#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "bench/controller_load/agent_fleet.h"
#include "tests/fakes/fake_kube_api_server.h"

namespace peregrine::loadtest {

class LoadKubelet {
 public:
  // Runs the pods the controller creates in namespace `ns`.
  LoadKubelet(testing::FakeKubeApiServer* server, AgentFleet* fleet, std::string ns);
  ~LoadKubelet();
  LoadKubelet(const LoadKubelet&) = delete;
  LoadKubelet& operator=(const LoadKubelet&) = delete;

  // A write the API server handled (its write observer).
  void OnWrite(const testing::FakeKubeApiServer::WriteRecord& write);
  // The machine of `pod` is lost: its agent's stream ends for good and the pod is Failed.
  absl::Status FailMachine(const std::string& pod);
  void Stop();

  int PodsStarted() const;             // bound, running and given an agent
  std::vector<std::string> Errors() const;  // what went wrong starting pods

 private:
  struct PodEvent {
    bool created = false;  // else deleted
    std::string name, uid;
    bool standby = false;
    std::string job;
  };
  void Loop();
  void StartPod(const PodEvent& pod);

  testing::FakeKubeApiServer* const server_;
  AgentFleet* const fleet_;
  const std::string ns_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<PodEvent> events_ ABSL_GUARDED_BY(mu_);
  int next_node_ ABSL_GUARDED_BY(mu_) = 0;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace peregrine::loadtest

#endif  // PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_KUBELET_H_
