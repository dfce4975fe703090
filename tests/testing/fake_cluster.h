// FakeCluster: the Cluster interface (controller/cluster.h) in memory, for tests of the
// executor. It keeps the documented contract and nothing more: creating an existing pod and
// deleting a missing one are OK, ListPods omits deleted pods, the persisted status is what
// LoadStatus returns. A created pod runs at once on a fresh machine ("fake-0", "fake-1", ...).
// Tests fail the next call of a method with FailNext, kill the controller after its n-th
// write with CrashAfter, change a pod with SetPodFailed, and read what the executor did
// (pods, deletes, events, quarantines, persisted statuses).
// Thread-safe (one mutex): the job controller's thread and the test may both call it.
#ifndef PEREGRINE_TESTS_TESTING_FAKE_CLUSTER_H_
#define PEREGRINE_TESTS_TESTING_FAKE_CLUSTER_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/cluster.h"

namespace peregrine::testing {

class FakeCluster final : public Cluster {
 public:
  enum class Method { kCreatePod, kDeletePod, kListPods, kQuarantineMachine, kRecordEvent, kPersistStatus, kLoadStatus };

  absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) override;
  absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) override;
  absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) override;
  absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) override;
  absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) override;
  absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) override;
  absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) override;
  std::string RendezvousDomain(const TrainingJob& job) override;
  absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) override;

  // The next call of `method` returns `status` (and has no effect); later calls succeed.
  void FailNext(Method method, absl::Status status);
  // A controller killed mid-round: the next `writes` successful writes (CreatePod,
  // DeletePod, QuarantineMachine, RecordEvent, PersistStatus) take effect, then every
  // call fails with kUnavailable and has no effect until Revive() (the restarted
  // controller's cluster: pods and the persisted status are as the killed one left them).
  void CrashAfter(int writes);
  void Revive();
  bool crashed() const;  // the CrashAfter budget is spent
  // The pod's machine is gone: ListPods shows it failed with `reason`.
  void SetPodFailed(const std::string& name, const std::string& reason);
  // Seeds the status LoadStatus returns (a controller restart).
  void SetPersistedStatus(JobStatus status);

  // The pods ListPods would return, in creation order.
  std::vector<PodObservation> pods() const;
  std::vector<JobEvent> events() const;
  // Every successful QuarantineMachine call: (machine, reason), in order.
  std::vector<std::pair<std::string, std::string>> quarantines() const;
  // The last persisted status, and how many times a status was persisted.
  std::optional<JobStatus> persisted() const;
  int persist_count() const;
  // The names of every successful DeletePod call, in order (also of pods already gone).
  std::vector<std::string> deletes() const;
  // Successful calls of `method` so far.
  int calls(Method method) const;

 private:
  absl::Status TakeFailure(Method method);

  mutable std::mutex mu_;
  std::vector<PodObservation> pods_;
  int next_machine_ = 0;
  std::vector<JobEvent> events_;
  std::vector<std::pair<std::string, std::string>> quarantines_;
  std::optional<JobStatus> persisted_;
  int persist_count_ = 0;
  uint32_t next_port_ = 29500;
  std::map<Method, absl::Status> failures_;
  std::map<Method, int> calls_;
  std::vector<std::string> deletes_;
  int writes_left_ = -1;  // CrashAfter: -1 unlimited
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_FAKE_CLUSTER_H_
