#include "tests/testing/fake_cluster.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace peregrine::testing {

absl::Status FakeCluster::TakeFailure(Method method) {
  if (writes_left_ == 0) return absl::UnavailableError("the controller was killed (FakeCluster::CrashAfter)");
  auto it = failures_.find(method);
  if (it == failures_.end()) {
    ++calls_[method];
    const bool write = method != Method::kListPods && method != Method::kLoadStatus;
    if (write && writes_left_ > 0) --writes_left_;
    return absl::OkStatus();
  }
  absl::Status s = std::move(it->second);
  failures_.erase(it);
  return s;
}

absl::Status FakeCluster::CreatePod(const TrainingJob&, const PodToCreate& pod) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kCreatePod); !s.ok()) return s;
  const bool exists = std::any_of(pods_.begin(), pods_.end(), [&](const PodObservation& p) { return p.name == pod.name; });
  if (exists) return absl::OkStatus();
  PodObservation p;
  p.name = pod.name;
  p.machine_id = absl::StrCat("fake-", next_machine_++);
  p.running = true;
  pods_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status FakeCluster::DeletePod(const TrainingJob&, const std::string& name, int) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kDeletePod); !s.ok()) return s;
  std::erase_if(pods_, [&](const PodObservation& p) { return p.name == name; });
  deletes_.push_back(name);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PodObservation>> FakeCluster::ListPods(const TrainingJob&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kListPods); !s.ok()) return s;
  return pods_;
}

absl::Status FakeCluster::QuarantineMachine(const std::string& machine_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kQuarantineMachine); !s.ok()) return s;
  quarantines_.emplace_back(machine_id, reason);
  return absl::OkStatus();
}

absl::Status FakeCluster::RecordEvent(const TrainingJob&, const JobEvent& event, int64_t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kRecordEvent); !s.ok()) return s;
  events_.push_back(event);
  return absl::OkStatus();
}

absl::Status FakeCluster::PersistStatus(const TrainingJob&, const JobStatus& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kPersistStatus); !s.ok()) return s;
  persisted_ = status;
  ++persist_count_;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobStatus>> FakeCluster::LoadStatus(const TrainingJob&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = TakeFailure(Method::kLoadStatus); !s.ok()) return s;
  return persisted_;
}

std::string FakeCluster::RendezvousDomain(const TrainingJob&) { return ""; }

absl::StatusOr<uint32_t> FakeCluster::RendezvousPort(const TrainingJob&) {
  std::lock_guard<std::mutex> lock(mu_);
  return next_port_++;
}

void FakeCluster::FailNext(Method method, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_[method] = std::move(status);
}

void FakeCluster::CrashAfter(int writes) {
  std::lock_guard<std::mutex> lock(mu_);
  writes_left_ = writes;
}

void FakeCluster::Revive() {
  std::lock_guard<std::mutex> lock(mu_);
  writes_left_ = -1;
}

bool FakeCluster::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_left_ == 0;
}

std::vector<std::string> FakeCluster::deletes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deletes_;
}

void FakeCluster::SetPodFailed(const std::string& name, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  for (PodObservation& p : pods_) {
    if (p.name != name) continue;
    p.running = false;
    p.failed = true;
    p.reason = reason;
  }
}

void FakeCluster::SetPersistedStatus(JobStatus status) {
  std::lock_guard<std::mutex> lock(mu_);
  persisted_ = std::move(status);
}

std::vector<PodObservation> FakeCluster::pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_;
}

std::vector<JobEvent> FakeCluster::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::vector<std::pair<std::string, std::string>> FakeCluster::quarantines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return quarantines_;
}

std::optional<JobStatus> FakeCluster::persisted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return persisted_;
}

int FakeCluster::persist_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return persist_count_;
}

int FakeCluster::calls(Method method) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

}  // namespace peregrine::testing
