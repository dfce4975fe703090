#include "controller/agent_registry.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/secret_token.h"

namespace peregrine {
namespace {

constexpr size_t kMaxExitSummaries = 32;
constexpr size_t kMaxInspectionAlarms = 64;

// The parts of a heartbeat's effect on an observation that a decision reacts to at once
// (everything but progress: steps, losses, iteration times and last_seen). Small: exits
// and non-OK inspections are empty on a healthy machine.
struct HeartbeatFacts {
  uint64_t attempt = 0;
  AgentTrainingPhase phase = AgentTrainingPhase::kUnknown;
  std::vector<RankExit> exits;
  std::vector<InspectionObservation> inspections;
  std::optional<CheckpointReportObservation> checkpoint;
  bool comm_profiles = false;
};

HeartbeatFacts FactsOf(const AgentObservation& obs) {
  return HeartbeatFacts{obs.attempt,      obs.phase,      obs.exits, obs.inspections,
                        obs.checkpoint,   !obs.comm_profiles.empty()};
}

bool SameExits(const std::vector<RankExit>& a, const std::vector<RankExit>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].global_rank != b[i].global_rank || a[i].exit_code != b[i].exit_code || a[i].signal != b[i].signal) {
      return false;
    }
  }
  return true;
}

// `at` is left out: an agent re-sends a lasting finding with each heartbeat.
bool SameInspections(const std::vector<InspectionObservation>& a, const std::vector<InspectionObservation>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].component != b[i].component || a[i].status != b[i].status ||
        a[i].summary != b[i].summary || a[i].machine_attributed != b[i].machine_attributed) {
      return false;
    }
  }
  return true;
}

bool SameCheckpoint(const std::optional<CheckpointReportObservation>& a,
                    const std::optional<CheckpointReportObservation>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  return a->stored_steps == b->stored_steps && a->backed_up_steps == b->backed_up_steps &&
         a->persisted_steps == b->persisted_steps && a->store_bytes == b->store_bytes &&
         a->memory_budget_bytes == b->memory_budget_bytes && a->held == b->held;
}

bool OnlyProgress(const HeartbeatFacts& before, const AgentObservation& after) {
  return before.attempt == after.attempt && before.phase == after.phase && SameExits(before.exits, after.exits) &&
         SameInspections(before.inspections, after.inspections) && SameCheckpoint(before.checkpoint, after.checkpoint) &&
         !before.comm_profiles && after.comm_profiles.empty();
}

}  // namespace

std::string JobKey(const std::string& ns, const std::string& name) { return absl::StrCat(ns, "/", name); }

const std::string& AgentRegistry::AddressOfSlot(const JobRecord& job, int slot) {
  static const std::string* const kNone = new std::string();
  auto pod = job.pod_of_slot.find(slot);
  if (pod == job.pod_of_slot.end()) return *kNone;
  auto rec = job.agents.find(pod->second);
  return rec == job.agents.end() ? *kNone : rec->second.obs.data_address;
}

AgentRegistry::CommitSent AgentRegistry::CommitOf(const JobRecord& job, const AssignmentSpec& assignment) {
  CommitSent c;
  c.attempt = assignment.attempt;
  c.committed_step = assignment.checkpoint.committed_step;
  for (int slot : assignment.checkpoint.backup_to) c.backup_addresses.push_back(AddressOfSlot(job, slot));
  return c;
}

std::map<int, std::string> AgentRegistry::DataAddresses(const JobRecord& job, const AssignmentSpec& assignment) {
  std::map<int, std::string> out;
  auto add = [&](int slot) {
    const std::string& address = AddressOfSlot(job, slot);
    if (!address.empty()) out[slot] = address;
  };
  for (int slot : assignment.checkpoint.backup_to) add(slot);
  for (int slot : assignment.checkpoint.restore_from) add(slot);
  return out;
}

void AgentRegistry::BindJob(const std::string& job_key, JobBinding binding) {
  absl::MutexLock lock(&mu_);
  jobs_[job_key].binding = std::move(binding);
}

void AgentRegistry::SetDesired(const std::string& job_key, const std::map<std::string, DesiredAgent>& desired) {
  std::vector<std::pair<std::shared_ptr<AgentStreamSink>, v1::ControllerMessage>> out;
  {
    absl::MutexLock lock(&mu_);
    JobRecord& job = jobs_[job_key];
    job.desired = desired;
    job.pod_of_slot.clear();
    for (const auto& [pod, want] : desired) {
      if (!want.standby && want.assignment.slot >= 0) job.pod_of_slot[want.assignment.slot] = pod;
    }
    // While an attempt runs, its connected agents hear of a committed step that advanced
    // (their stores keep it) and of backup holders whose addresses became known (a slot
    // refilled by a new pod, whose agent registered after the attempt's assignments went
    // out) or changed; the ack or command of a new attempt carries its own.
    for (const auto& [pod, want] : desired) {
      const CheckpointPlanSpec& plan = want.assignment.checkpoint;
      if (want.standby || plan.interval_steps == 0) continue;
      auto rec = job.agents.find(pod);
      if (rec == job.agents.end() || !rec->second.sink) continue;
      AgentRecord& r = rec->second;
      if (r.obs.acked_attempt != want.assignment.attempt && r.obs.attempt != want.assignment.attempt) continue;
      // Compared in place: this runs for every agent on every call.
      CommitSent& sent = r.commit_sent;
      const bool attempt_known = sent.attempt == want.assignment.attempt;
      const bool step_news = plan.committed_step != 0 && (!attempt_known || sent.committed_step != plan.committed_step);
      bool peer_news = !attempt_known || sent.backup_addresses.size() != plan.backup_to.size();
      for (size_t i = 0; !peer_news && i < plan.backup_to.size(); ++i) {
        peer_news = sent.backup_addresses[i] != AddressOfSlot(job, plan.backup_to[i]);
      }
      if (!step_news && !peer_news) continue;
      sent = CommitOf(job, want.assignment);
      v1::ControllerMessage m;
      v1::CheckpointCommit* commit = m.mutable_checkpoint_commit();
      commit->set_attempt(sent.attempt);
      if (step_news) commit->set_committed_step(sent.committed_step);
      if (peer_news) {
        for (size_t i = 0; i < plan.backup_to.size(); ++i) {
          v1::CheckpointPeerAddress* p = commit->add_backup_to();
          p->set_slot(static_cast<uint32_t>(std::max(plan.backup_to[i], 0)));
          p->set_address(sent.backup_addresses[i]);
        }
      }
      out.emplace_back(r.sink, std::move(m));
    }
  }
  for (auto& [sink, message] : out) sink->Send(message);
}

std::vector<AgentObservation> AgentRegistry::Observe(const std::string& job_key) const {
  absl::MutexLock lock(&mu_);
  std::vector<AgentObservation> out;
  auto it = jobs_.find(job_key);
  if (it == jobs_.end()) return out;
  for (const auto& [pod, rec] : it->second.agents) {
    AgentObservation obs = rec.obs;
    obs.pending_command_ids.clear();
    for (const auto& [id, cmd] : rec.pending) obs.pending_command_ids.push_back(id);
    out.push_back(std::move(obs));
  }
  return out;
}

int AgentRegistry::ConnectedCount(const std::string& job_key) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_key);
  if (it == jobs_.end()) return 0;
  int n = 0;
  for (const auto& [pod, rec] : it->second.agents) n += rec.obs.connected ? 1 : 0;
  return n;
}

void AgentRegistry::Send(const std::string& job_key, const CommandToSend& command, int64_t now) {
  std::shared_ptr<AgentStreamSink> sink;
  v1::ControllerMessage message;
  {
    absl::MutexLock lock(&mu_);
    auto job = jobs_.find(job_key);
    if (job == jobs_.end()) return;
    AgentRecord& rec = job->second.agents[command.pod];
    if (rec.obs.pod.empty()) rec.obs.pod = command.pod;
    if (rec.pending.count(command.id)) return;
    const std::map<int, std::string> addresses = DataAddresses(job->second, command.assignment);
    v1::Command wire = CommandToWire(command, job->second.binding.spec, now, addresses);
    if (command.kind == CommandKind::kRestartInPlace || command.kind == CommandKind::kActivate) {
      rec.commit_sent = CommitOf(job->second, command.assignment);
    }
    rec.pending[command.id] = wire;
    rec.pending_sent_at[command.id] = now;
    if (command.kind != CommandKind::kStop) rec.obs.failed_commands.erase(command.id);
    sink = rec.sink;
    *message.mutable_command() = std::move(wire);
  }
  if (sink) sink->Send(message);
}

void AgentRegistry::ResendOverdue(const std::string& job_key, int64_t now, int64_t overdue_ns) {
  std::vector<std::pair<std::shared_ptr<AgentStreamSink>, v1::ControllerMessage>> out;
  {
    absl::MutexLock lock(&mu_);
    auto job = jobs_.find(job_key);
    if (job == jobs_.end()) return;
    for (auto& [pod, rec] : job->second.agents) {
      if (!rec.sink) continue;
      for (auto& [id, cmd] : rec.pending) {
        int64_t& sent = rec.pending_sent_at[id];
        if (now - sent < overdue_ns) continue;
        sent = now;
        v1::ControllerMessage m;
        *m.mutable_command() = cmd;
        out.emplace_back(rec.sink, std::move(m));
      }
    }
  }
  for (auto& [sink, m] : out) sink->Send(m);
}

void AgentRegistry::Forget(const std::string& job_key, const std::string& pod) {
  absl::MutexLock lock(&mu_);
  auto job = jobs_.find(job_key);
  if (job == jobs_.end()) return;
  auto it = job->second.agents.find(pod);
  if (it == job->second.agents.end()) return;
  if (it->second.sink) {
    by_sink_.erase(it->second.sink.get());
    --job->second.open_streams;
  }
  job->second.agents.erase(it);
}

void AgentRegistry::UnbindJob(const std::string& job_key, const std::string& reason) {
  std::vector<std::shared_ptr<AgentStreamSink>> streams;
  {
    absl::MutexLock lock(&mu_);
    auto job = jobs_.find(job_key);
    if (job == jobs_.end()) return;
    for (auto& [pod, rec] : job->second.agents) {
      if (!rec.sink) continue;
      by_sink_.erase(rec.sink.get());
      streams.push_back(std::move(rec.sink));
    }
    jobs_.erase(job);
  }
  v1::ControllerMessage reject;
  reject.mutable_reject()->set_reason(reason);
  for (const auto& sink : streams) {
    sink->Send(reject);
    sink->End(absl::NotFoundError(reason));
  }
}

size_t AgentRegistry::JobCountForTest() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

void AgentRegistry::SetChangeCallback(std::function<void(const std::string&)> callback) {
  absl::MutexLock lock(&mu_);
  on_change_ = std::move(callback);
}

void AgentRegistry::Notify(const std::string& job_key) {
  std::function<void(const std::string&)> cb;
  {
    absl::MutexLock lock(&mu_);
    cb = on_change_;
  }
  if (cb) cb(job_key);
}

std::vector<std::string> AgentRegistry::RecentExitSummaries(const std::string& job_key, size_t max) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto job = jobs_.find(job_key);
  if (job == jobs_.end()) return out;
  for (const auto& [pod, rec] : job->second.agents) {
    for (const auto& s : rec.recent_exit_summaries) out.push_back(s);
  }
  if (out.size() > max) out.erase(out.begin(), out.begin() + static_cast<long>(out.size() - max));
  return out;
}

absl::Status AgentRegistry::SetAgentKey(std::string key) {
  if (!key.empty()) {
    if (absl::Status s = ValidateAgentKey(key); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  agent_key_ = std::move(key);
  return absl::OkStatus();
}

void AgentRegistry::SetBootstrapVerifier(std::shared_ptr<AgentBootstrapVerifier> verifier) {
  absl::MutexLock lock(&mu_);
  bootstrap_verifier_ = std::move(verifier);
}

size_t AgentRegistry::MaxAgentStreams(const std::string& job_key) const {
  absl::MutexLock lock(&mu_);
  auto job = jobs_.find(job_key);
  return (job == jobs_.end() ? 0 : job->second.desired.size()) + kAgentStreamMargin;
}

uint64_t AgentRegistry::DroppedCommandResults() const {
  absl::MutexLock lock(&mu_);
  return dropped_results_;
}

// A registration is checked in two steps: the cheap part (the job, the pod, the
// credential) under the lock, then, only when the bearer token is not the pod's
// credential, the bootstrap verifier without the lock (it may call the API server). The
// record is then taken under the lock again, re-checking what may have changed meanwhile
// (the job re-bound with another uid, the pod no longer desired, the stream cap).
absl::StatusOr<v1::RegisterAck> AgentRegistry::OnRegister(std::shared_ptr<AgentStreamSink> sink,
                                                          const std::string& bearer_token, const v1::Register& reg,
                                                          int64_t now) {
  if (reg.job_name().empty()) return absl::InvalidArgumentError("register.job_name is empty");
  if (reg.pod_name().empty()) return absl::InvalidArgumentError("register.pod_name is empty");
  const std::string ns = reg.job_namespace().empty() ? "default" : reg.job_namespace();
  const std::string key = JobKey(ns, reg.job_name());
  AgentIdentity identity{ns, reg.job_name(), "", reg.pod_name()};
  std::string credential;  // the pod's; empty when agents are not authenticated
  std::string data_token;  // the job's data-channel token; empty likewise
  std::shared_ptr<AgentBootstrapVerifier> verifier;
  {
    absl::MutexLock lock(&mu_);
    auto job = jobs_.find(key);
    if (job == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", key));
    if (!job->second.desired.count(reg.pod_name())) {
      return absl::NotFoundError(absl::StrCat("pod ", reg.pod_name(), " is not part of job ", key));
    }
    identity.job_uid = job->second.binding.job_uid;
    if (!agent_key_.empty()) {
      absl::StatusOr<std::string> derived = DeriveAgentCredential(agent_key_, identity);
      if (!derived.ok()) return absl::InvalidArgumentError(derived.status().message());
      credential = *std::move(derived);
      absl::StatusOr<std::string> data = DeriveDataToken(agent_key_, ns, reg.job_name(), identity.job_uid);
      if (!data.ok()) return absl::InvalidArgumentError(data.status().message());
      data_token = *std::move(data);
      if (!SecretTokensEqual(bearer_token, credential)) verifier = bootstrap_verifier_;
      if (!SecretTokensEqual(bearer_token, credential) && verifier == nullptr) {
        return absl::UnauthenticatedError(bearer_token.empty()
                                              ? absl::StrCat("no credential presented for pod ", reg.pod_name())
                                              : absl::StrCat("the credential presented is not pod ", reg.pod_name(),
                                                             "'s of job ", key));
      }
    }
  }
  if (verifier != nullptr) {
    if (bearer_token.empty()) {
      return absl::UnauthenticatedError(absl::StrCat("no credential or bootstrap token presented for pod ",
                                                     reg.pod_name()));
    }
    if (absl::Status s = verifier->Verify(identity, bearer_token); !s.ok()) {
      if (s.code() == absl::StatusCode::kUnavailable) return s;
      return absl::UnauthenticatedError(
          absl::StrCat("pod ", reg.pod_name(), " of job ", key, " not authenticated: ", s.message()));
    }
  }
  v1::RegisterAck ack;
  std::vector<v1::Command> resend;
  std::shared_ptr<AgentStreamSink> replaced;
  {
    absl::MutexLock lock(&mu_);
    auto job = jobs_.find(key);
    if (job == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", key));
    const JobBinding& binding = job->second.binding;
    if (binding.job_uid != identity.job_uid) {
      return absl::UnavailableError(absl::StrCat("job ", key, " changed while pod ", reg.pod_name(),
                                                 " registered; register again"));
    }
    auto desired = job->second.desired.find(reg.pod_name());
    if (desired == job->second.desired.end()) {
      return absl::NotFoundError(absl::StrCat("pod ", reg.pod_name(), " is not part of job ", key));
    }
    // The job's open streams but this pod's own (which this registration replaces).
    auto own = job->second.agents.find(reg.pod_name());
    const size_t open_streams =
        job->second.open_streams - (own != job->second.agents.end() && own->second.sink ? 1 : 0);
    const size_t cap = job->second.desired.size() + kAgentStreamMargin;
    if (open_streams >= cap) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", key, " already has ", open_streams, " open agent streams (the most is ", cap, ")"));
    }
    AgentRecord& rec = job->second.agents[reg.pod_name()];
    if (rec.sink) {
      by_sink_.erase(rec.sink.get());
      --job->second.open_streams;
      if (rec.sink != sink) replaced = std::move(rec.sink);
    }
    rec.sink = sink;
    by_sink_[sink.get()] = SinkEntry{key, &job->second, &rec};
    ++job->second.open_streams;
    ack.set_agent_credential(credential);
    ack.set_data_token(data_token);
    AgentObservation& obs = rec.obs;
    obs.pod = reg.pod_name();
    obs.machine_id = reg.machine_id();
    obs.connected = true;
    obs.last_seen = now;
    obs.registered_as_standby = reg.role() == v1::AGENT_ROLE_STANDBY;
    obs.self_check_passed = reg.self_check().passed() || reg.role() != v1::AGENT_ROLE_STANDBY;
    obs.nccl_profiling = false;  // unknown until a set_nccl_mode result says otherwise
    obs.data_address = reg.data_address();
    ApplyTrainingState(reg.training(), &obs);

    ack.set_controller_id(controller_id_);
    ack.set_heartbeat_interval_ms(heartbeat_interval_ms_);
    const DesiredAgent& want = desired->second;
    ack.set_role(want.standby ? v1::AGENT_ROLE_STANDBY : v1::AGENT_ROLE_ACTIVE);
    if (!want.standby) {
      const std::map<int, std::string> addresses = DataAddresses(job->second, want.assignment);
      *ack.mutable_assignment() = ToWire(want.assignment, binding.spec, addresses);
      obs.acked_attempt = want.assignment.attempt;
      rec.commit_sent = CommitOf(job->second, want.assignment);
      // The ack converges an agent; it is no longer a standby once told to be active.
      if (want.assignment.attempt > 0) obs.registered_as_standby = false;
    }
    // Commands it has not executed are sent again; the executed ones' results are lost.
    std::set<std::string> executed(reg.executed_command_ids().begin(), reg.executed_command_ids().end());
    for (auto it = rec.pending.begin(); it != rec.pending.end();) {
      if (executed.count(it->first)) {
        rec.pending_sent_at.erase(it->first);
        it = rec.pending.erase(it);
      } else {
        resend.push_back(it->second);
        rec.pending_sent_at[it->first] = now;
        ++it;
      }
    }
  }
  if (replaced) {
    const std::string why = absl::StrCat("pod ", reg.pod_name(), " of job ", key,
                                         ": this stream was replaced by a newer registration of the pod");
    v1::ControllerMessage reject;
    reject.mutable_reject()->set_reason(why);
    replaced->Send(reject);
    replaced->End(absl::AbortedError(why));
  }
  for (const v1::Command& c : resend) {
    v1::ControllerMessage m;
    *m.mutable_command() = c;
    sink->Send(m);
  }
  Notify(key);
  return ack;
}

// A by_sink_ entry exists exactly while its record holds that sink (OnRegister adds it,
// OnDisconnect, a newer registration, Forget and UnbindJob remove it before the record
// goes), so the pointers it keeps are valid.
AgentRegistry::AgentRecord* AgentRegistry::FindBySink(const AgentStreamSink* sink, std::string* job_key,
                                                      JobRecord** job) {
  auto it = by_sink_.find(sink);
  if (it == by_sink_.end()) return nullptr;
  *job_key = it->second.job_key;
  if (job != nullptr) *job = it->second.job;
  return it->second.record;
}

absl::Status AgentRegistry::OnMessage(const AgentStreamSink* sink, const v1::AgentMessage& message, int64_t now) {
  std::string key;
  bool progress_only = false;  // a heartbeat that changed nothing but progress
  {
    absl::MutexLock lock(&mu_);
    JobRecord* job = nullptr;
    AgentRecord* rec = FindBySink(sink, &key, &job);
    if (rec == nullptr) return absl::FailedPreconditionError("the first message on a stream must be register");
    AgentObservation& obs = rec->obs;
    obs.last_seen = now;
    switch (message.body_case()) {
      case v1::AgentMessage::kRegister:
        return absl::InvalidArgumentError("register sent twice on one stream");
      case v1::AgentMessage::kHeartbeat: {
        const v1::Heartbeat& hb = message.heartbeat();
        const HeartbeatFacts before = FactsOf(obs);
        ApplyTrainingState(hb.training(), &obs);
        double iter_sum = 0;
        int iter_n = 0;
        for (const v1::IterationSummary& it : hb.iterations()) {
          uint64_t& step = obs.rank_steps[static_cast<int>(it.global_rank())];
          step = std::max(step, it.last_completed_step());
          RankLossObservation& loss = obs.rank_losses[static_cast<int>(it.global_rank())];
          if (it.last_completed_step() >= loss.step) {
            loss = RankLossObservation{it.last_completed_step(), it.last_loss(), it.last_grad_norm()};
          }
          if (it.mean_iteration_seconds() > 0) {
            iter_sum += it.mean_iteration_seconds();
            ++iter_n;
          }
          RankIterationObservation& ri = obs.rank_iterations[static_cast<int>(it.global_rank())];
          if (it.last_completed_step() >= ri.step) {
            ri.step = it.last_completed_step();
            if (it.mean_iteration_seconds() > 0) ri.mean_iteration_seconds = it.mean_iteration_seconds();
            ri.micro_batches = it.micro_batches();
          }
        }
        if (iter_n > 0) obs.mean_iteration_seconds = iter_sum / iter_n;
        obs.comm_profiles.clear();
        for (const v1::CommProfile& p : hb.comm_profiles()) {
          CommProfileObservation cp;
          cp.comm_id = p.comm_id();
          cp.global_rank = static_cast<int>(p.global_rank());
          cp.rank_in_comm = static_cast<int>(p.rank_in_comm());
          cp.comm_size = static_cast<int>(p.comm_size());
          for (const v1::CollectiveTiming& t : p.collectives()) {
            cp.collectives.push_back(
                CollectiveObservation{t.sequence(), t.op(), t.enter_time(), t.exit_time(), t.peer()});
          }
          obs.comm_profiles.push_back(std::move(cp));
        }
        if (hb.has_checkpoint()) obs.checkpoint = CheckpointReportFromWire(hb.checkpoint());
        obs.inspections.clear();
        for (const v1::InspectionResult& r : hb.inspections()) {
          if (r.status() == v1::INSPECTION_STATUS_OK || r.status() == v1::INSPECTION_STATUS_NOT_PRESENT) continue;
          obs.inspections.push_back(InspectionFromWire(r, r.observed_at() != 0 ? r.observed_at() : now));
        }
        progress_only = OnlyProgress(before, obs);
        break;
      }
      case v1::AgentMessage::kEvent: {
        const v1::Event& ev = message.event();
        if (ev.has_fail_slow()) {
          const v1::FailSlowEvent& fs = ev.fail_slow();
          RankFailSlowObservation& r = obs.fail_slow[static_cast<int>(fs.global_rank())];
          if (fs.kind() == v1::FailSlowEvent::KIND_SLOWDOWN_START) {
            r.slow = true;
            r.onset = fs.onset_time();
            r.ended_at = 0;
          } else if (fs.kind() == v1::FailSlowEvent::KIND_SLOWDOWN_END) {
            r.slow = false;
            r.ended_at = fs.onset_time();
          }
          if (fs.kind() != v1::FailSlowEvent::KIND_UNSPECIFIED) {
            r.severity = fs.severity();
            r.before_seconds = fs.before_seconds();
            r.after_seconds = fs.after_seconds();
            r.iteration_index = fs.iteration_index();
          }
        }
        if (ev.has_checkpoint()) {
          obs.checkpoint_events.push_back(CheckpointEventFromWire(ev.checkpoint(), ev.at() != 0 ? ev.at() : now));
          if (obs.checkpoint_events.size() > kMaxCheckpointEvents) obs.checkpoint_events.erase(obs.checkpoint_events.begin());
        }
        if (ev.has_inspection_alarm()) {
          obs.alarms.push_back(InspectionFromWire(ev.inspection_alarm(), ev.at() != 0 ? ev.at() : now));
          if (obs.alarms.size() > kMaxInspectionAlarms) obs.alarms.erase(obs.alarms.begin());
        }
        if (ev.has_process_exit()) {
          const v1::ProcessExit& pe = ev.process_exit();
          std::string tail = pe.last_log_lines().empty() ? "" : pe.last_log_lines(pe.last_log_lines_size() - 1);
          rec->recent_exit_summaries.push_back(absl::StrFormat(
              "%s rank %d %s: %s", obs.pod, pe.global_rank(),
              pe.signal() != 0 ? absl::StrCat("killed by signal ", pe.signal()) : absl::StrCat("exited with code ", pe.exit_code()),
              tail));
          if (rec->recent_exit_summaries.size() > kMaxExitSummaries) {
            rec->recent_exit_summaries.erase(rec->recent_exit_summaries.begin());
          }
          if (pe.attempt() == obs.attempt) {
            for (RankExit& e : obs.exits) {
              if (e.global_rank == static_cast<int>(pe.global_rank())) {
                e.last_log_lines.assign(pe.last_log_lines().begin(), pe.last_log_lines().end());
              }
            }
          }
        }
        break;
      }
      case v1::AgentMessage::kCommandResult: {
        const v1::CommandResult& r = message.command_result();
        if (r.command_id().empty()) return absl::InvalidArgumentError("command_result.command_id is empty");
        auto sent = rec->pending.find(r.command_id());
        if (sent == rec->pending.end()) {
          // Not a command this agent has pending (already answered, or never sent to it):
          // dropped, so the results kept stay keyed by the controller's own ids.
          ++dropped_results_;
          return absl::OkStatus();
        }
        if (sent->second.has_nccl_mode() && r.status().code() == 0) {
          obs.nccl_profiling = sent->second.nccl_mode().profiling();
        }
        rec->pending.erase(r.command_id());
        rec->pending_sent_at.erase(r.command_id());
        if (r.status().code() != 0) {
          obs.failed_commands[r.command_id()] = r.status().message();
        } else {
          obs.failed_commands.erase(r.command_id());
        }
        if (!obs.command_results.count(r.command_id())) rec->result_order.push_back(r.command_id());
        obs.command_results[r.command_id()] = CommandResultFromWire(r);
        while (rec->result_order.size() > kMaxCommandResults) {
          obs.command_results.erase(rec->result_order.front());
          rec->result_order.erase(rec->result_order.begin());
        }
        break;
      }
      case v1::AgentMessage::BODY_NOT_SET:
        return absl::InvalidArgumentError("agent message has no body");
    }
    // Progress alone wakes the job at most once per heartbeat interval; anything else at
    // once. Either way the round reads every agent's latest state.
    std::optional<int64_t>& last = job->notified_at;
    const int64_t interval = static_cast<int64_t>(heartbeat_interval_ms_) * 1000000;
    if (progress_only && last.has_value() && now >= *last && now - *last < interval) return absl::OkStatus();
    last = now;
  }
  Notify(key);
  return absl::OkStatus();
}

void AgentRegistry::OnDisconnect(const AgentStreamSink* sink, int64_t now) {
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* job = nullptr;
    AgentRecord* rec = FindBySink(sink, &key, &job);
    by_sink_.erase(sink);
    if (rec == nullptr || rec->sink.get() != sink) return;
    rec->sink.reset();
    --job->open_streams;
    rec->obs.connected = false;
    rec->obs.last_seen = now;
  }
  Notify(key);
}

int AgentRegistry::ConnectedCountForTest() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [key, job] : jobs_) {
    for (const auto& [pod, rec] : job.agents) n += rec.obs.connected ? 1 : 0;
  }
  return n;
}

}  // namespace peregrine
