#include "controller/job_controller.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "controller/job_parser.h"
#include "controller/core/cordons.h"
#include "controller/core/node_attribution.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {
// A command without a result for this long is sent again (idempotent by id).
constexpr int64_t kCommandResendNanos = 10'000'000'000;

// After the n-th status write in a row failed: 100 ms doubling, at most 10 s.
int64_t WriteRetryDelay(int failures) {
  constexpr int64_t kFirst = 100'000'000, kMax = 10'000'000'000;
  int64_t delay = kFirst;
  for (int i = 1; i < failures && delay < kMax; ++i) delay *= 2;
  return std::min(delay, kMax);
}
}  // namespace

JobController::JobController(TrainingJob job, Cluster* cluster, AgentRegistry* registry, ControllerMetrics* metrics,
                             Options options)
    : key_(JobKey(job.metadata.namespace_, job.metadata.name)),
      cluster_(cluster),
      registry_(registry),
      metrics_(metrics),
      options_(std::move(options)),
      job_(std::move(job)) {}

JobController::~JobController() { Stop(); }

absl::Status JobController::Start(bool run_loop) {
  const TrainingJob current = job();
  auto loaded = cluster_->LoadStatus(current);
  if (!loaded.ok()) return loaded.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loaded->has_value()) {
      status_ = **loaded;
      timeline_.push_back(TimelineEntry{options_.clock->UnixNanos(), absl::StrCat("controller resumed job ", key(), " at attempt ",
                                                                     status_.attempt, ", step ",
                                                                     status_.last_completed_step)});
    }
  }
  AgentRegistry::JobBinding binding;
  binding.spec = current.spec;
  binding.job_uid = current.metadata.uid;
  registry_->BindJob(key(), binding);
  {
    // Agents that reconnect before the first round must get the persisted desired state.
    JobStatus st = Snapshot();
    if (st.attempt > 0) registry_->SetDesired(key(), DesiredAgents(current.spec, st));
  }
  if (run_loop) thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void JobController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobController::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

TrainingJob JobController::job() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_;
}

absl::StatusOr<int64_t> JobController::UpdateJob(TrainingJob updated) {
  int64_t generation = 0;
  std::string what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (updated.metadata.namespace_ != job_.metadata.namespace_ || updated.metadata.name != job_.metadata.name) {
      return absl::InvalidArgumentError(absl::StrCat("update for job ", updated.metadata.namespace_, "/",
                                                     updated.metadata.name, " sent to the controller of ", key_));
    }
    if (!updated.metadata.uid.empty() && !job_.metadata.uid.empty() && updated.metadata.uid != job_.metadata.uid) {
      return absl::InvalidArgumentError(absl::StrCat("update for job ", key_, " names uid ", updated.metadata.uid,
                                                     ", the running job is uid ", job_.metadata.uid));
    }
    updated.metadata.generation = job_.metadata.generation + 1;
    if (absl::Status s = ValidateTrainingJob(updated); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("update of job ", key_, " rejected: ", s.message()));
    }
    generation = updated.metadata.generation;
    const CodeVersionSpec& from = job_.spec.code;
    const CodeVersionSpec& to = updated.spec.code;
    auto hot = updated.metadata.annotations.find("peregrine.dev/hot-update");
    const bool urgent = hot != updated.metadata.annotations.end() && hot->second == "urgent";
    what = from == to ? absl::StrCat("spec updated to generation ", generation)
                      : absl::StrCat("spec updated to generation ", generation, ": code revision ", from.revision,
                                     " -> ", to.revision, urgent ? " (urgent)" : " (lazy)");
    job_ = std::move(updated);
    timeline_.push_back(TimelineEntry{options_.clock->UnixNanos(), what});
    AgentRegistry::JobBinding binding;
    binding.spec = job_.spec;
    binding.job_uid = job_.metadata.uid;
    registry_->BindJob(key_, binding);
  }
  Wake();
  return generation;
}

JobStatus JobController::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

std::vector<TimelineEntry> JobController::Timeline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeline_;
}

void JobController::Note(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timeline_.push_back(TimelineEntry{options_.clock->UnixNanos(), what});
  }
  Wake();
}

bool JobController::WaitFor(const std::function<bool(const JobStatus&)>& pred, int64_t timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(status_); });
}

void JobController::Loop() {
  int64_t wait_ns = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns), [&] { return stop_ || wake_; });
      if (stop_) return;
      wake_ = false;
    }
    const auto started = std::chrono::steady_clock::now();
    const int64_t requeue_ns = ReconcileOnce().requeue_after_ns;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    bool error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = !last_error_.empty();
    }
    metrics_->ObserveReconcile(seconds, error);
    wait_ns = requeue_ns > 0 ? std::min(requeue_ns, options_.resync_ns) : options_.resync_ns;
  }
}

JobController::RoundResult JobController::ReconcileOnce() {
  const TrainingJob current = job();  // this round decides from one version of the job
  const int64_t now = options_.clock->UnixNanos();
  const JobStatus before = Snapshot();
  RoundResult result;
  std::string error;  // the round's last error, for the status
  auto note = [&](const absl::Status& s) {
    if (s.ok()) return;
    error = s.ToString();
    if (result.error.ok()) result.error = s;
  };

  JobObservation obs;
  auto pods = cluster_->ListPods(current);
  if (!pods.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    last_error_ = pods.status().ToString();
    result.error = pods.status();
    return result;  // deciding on a partial picture could evict healthy machines
  }
  obs.pods = std::move(*pods);
  obs.agents = registry_->Observe(key());
  AttributeNodeFindings(&obs);  // the node inspector's findings on the pods' Nodes
  obs.rendezvous_domain = cluster_->RendezvousDomain(current);
  obs.hold = cluster_->AdmissionHold(current);
  if (auto port = cluster_->RendezvousPort(current); port.ok()) {
    obs.candidate_master_port = *port;
  } else {
    note(port.status());
  }

  JobPlan plan = DecideJob(current, before, obs, now, options_.decision);
  // Intent before action: the decided status (evictions, the slots' new pods, standbys,
  // the attempt, a diagnosis stage, quarantines still to do) is written before anything
  // acts on it. A round whose write failed acts on nothing and keeps the last written
  // status, so the next round decides again from it; nothing the cluster or an agent was
  // told can be missing from the status after a crash.
  if (JobStatusToJson(plan.status) != JobStatusToJson(before)) {
    if (absl::Status s = cluster_->PersistStatus(current, plan.status); !s.ok()) {
      result.error = s;
      result.status_write = s;
      result.requeue_after_ns = WriteRetryDelay(++failed_writes_);
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = s.ToString();
      return result;
    }
  }
  failed_writes_ = 0;
  registry_->SetDesired(key(), plan.desired_agents);
  for (const PodToCreate& c : plan.create_pods) {
    absl::Status s = cluster_->CreatePod(current, c);
    note(s);
    // Refused for good (e.g. the API server's 400/422): the same pod would be refused again.
    if (absl::IsInvalidArgument(s) && result.pod_rejected.ok()) {
      result.pod_rejected = absl::InvalidArgumentError(absl::StrCat("pod ", c.name, " cannot be created: ", s.message()));
    }
  }
  for (const PodToDelete& d : plan.delete_pods) {
    const int grace_ms = current.spec.fault_tolerance.restart_grace_seconds * 1000;
    note(cluster_->DeletePod(current, d.name, grace_ms));
    registry_->Forget(key(), d.name);
  }
  for (const CommandToSend& c : plan.commands) registry_->Send(key(), c, now);
  registry_->ResendOverdue(key(), now, kCommandResendNanos);
  std::vector<TimelineEntry> entries;
  for (const JobEvent& e : plan.events) {
    note(cluster_->RecordEvent(current, e, now));
    entries.push_back(TimelineEntry{now, absl::StrCat(e.reason, ": ", e.message)});
  }
  // Evicted machines go to node health management. The eviction (quarantined = false) is
  // written above, before the cordon; the cordon is marked done by a second write after
  // it succeeded. A crash in between cordons again after the restart (idempotent).
  JobStatus written = plan.status;
  bool quarantined_any = false;
  for (const QuarantineRequest& q : plan.quarantine) {
    const bool cordoned_by_others = cluster_->CordonedByOthers(q.machine_id);
    if (absl::Status s = cluster_->QuarantineMachine(q.machine_id, q.reason); !s.ok()) {
      note(s);
      continue;
    }
    RecordCordon(q, cordoned_by_others, now, plan.status);
    for (Eviction& e : plan.status.evicted) {
      if (e.machine_id == q.machine_id && !e.quarantined) {
        e.quarantined = true;
        quarantined_any = true;
      }
    }
  }
  if (quarantined_any) {
    if (absl::Status s = cluster_->PersistStatus(current, plan.status); s.ok()) {
      written = plan.status;
    } else {
      note(s);  // the next round cordons again (a no-op) and writes again
    }
  }
  metrics_->ObserveJob(current.metadata.namespace_, current.metadata.name, before, plan.status);
  metrics_->ObserveAgents(current.metadata.namespace_, current.metadata.name, plan.status, obs);
  metrics_->ObserveAgentResultsDropped(registry_->DroppedCommandResults());
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(written);
    last_error_ = error;
    for (auto& e : entries) timeline_.push_back(std::move(e));
    if (timeline_.size() > 1000) timeline_.erase(timeline_.begin(), timeline_.begin() + 500);
  }
  cv_.notify_all();
  result.requeue_after_ns = plan.requeue_after_ns;
  return result;
}

}  // namespace peregrine
