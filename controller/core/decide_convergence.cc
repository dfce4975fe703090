// DecideJob, attempts and agent convergence: the desired assignment, starting attempts, stopping, converging agents.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/conditions.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

namespace peregrine::decision_internal {

std::string Decider::PodAddress(const std::string& pod) const {
  return obs_.rendezvous_domain.empty() ? "127.0.0.1" : absl::StrCat(pod, ".", obs_.rendezvous_domain);
}

std::string Decider::MasterAddr() const {
  const JobStatus& st = plan_.status;
  if (obs_.rendezvous_domain.empty() || st.slots.empty()) return "127.0.0.1";
  return absl::StrCat(st.slots[0].pod, ".", obs_.rendezvous_domain);
}

void Decider::MaybeStartFirstAttempt() {
  JobStatus& st = plan_.status;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    const PodObservation* p = Pod(slot.pod);
    if (!p || !p->running || !a || !a->connected) return;  // wait for every slot's agent
  }
  st.attempt += 1;  // 1, or the next one after a suspension
  st.attempt_started_at = now_;
  st.master_addr = MasterAddr();
  st.master_port = obs_.candidate_master_port;
  st.phase = JobPhase::kRunning;
  Event(JobEventType::kNormal, "Started",
        absl::StrFormat("all %d machines registered; training attempt %d starts from step %d", st.slots.size(),
                        st.attempt, st.resume_step));
}

void Decider::StartNewAttempt(Incident* inc) {
  JobStatus& st = plan_.status;
  st.attempt += 1;
  SetResumePoint(inc);
  st.max_completed_step = std::max(st.max_completed_step, st.resume_step);
  st.attempt_started_at = now_;
  st.master_addr = MasterAddr();
  st.master_port = obs_.candidate_master_port;
  inc->resume_step = st.resume_step;
  inc->actions.push_back(absl::StrFormat("restart %d machines in place from step %d (attempt %d)", st.slots.size(),
                                         st.resume_step, st.attempt));
  Event(JobEventType::kNormal, "Restarting", absl::StrCat("incident ", inc->id, ": ", inc->decision, "; ", inc->actions.back()));
}

void Decider::StopAll() {
  for (const SlotStatus& slot : plan_.status.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr || !a->connected) continue;
    if (a->phase == AgentTrainingPhase::kIdle || a->phase == AgentTrainingPhase::kExited) continue;
    CommandToSend c;
    c.pod = slot.pod;
    c.id = absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/", slot.pod, "/stop");
    c.kind = CommandKind::kStop;
    c.grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
    if (std::find(a->pending_command_ids.begin(), a->pending_command_ids.end(), c.id) == a->pending_command_ids.end()) {
      plan_.commands.push_back(c);
    }
  }
}

std::string Decider::CommandId(const std::string& pod, uint64_t attempt) const {
  return absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/", pod, "/attempt-", attempt);
}

// Every slot's agent runs the current attempt; one that does not gets a command with a
// deterministic id (an agent that registered after the attempt began converges alone).
void Decider::ConvergeAgents() {
  JobStatus& st = plan_.status;
  // Built on the first command: every slot's plan in one pass (a job-wide restart sends one
  // to each slot).
  std::optional<std::map<int, AssignmentSpec>> assignments;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr || !a->connected) continue;
    if (a->attempt == st.attempt && a->phase != AgentTrainingPhase::kIdle && a->phase != AgentTrainingPhase::kUnknown) {
      continue;
    }
    if (a->acked_attempt == st.attempt && !a->registered_as_standby) continue;
    const std::string id = CommandId(slot.pod, st.attempt);
    if (std::find(a->pending_command_ids.begin(), a->pending_command_ids.end(), id) != a->pending_command_ids.end()) {
      continue;
    }
    if (a->failed_commands.count(id)) continue;
    CommandToSend c;
    c.pod = slot.pod;
    c.id = id;
    c.kind = a->registered_as_standby ? CommandKind::kActivate : CommandKind::kRestartInPlace;
    if (!assignments) assignments = peregrine::DesiredAssignments(spec_, st);
    c.assignment = (*assignments)[slot.index];
    c.grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
    plan_.commands.push_back(std::move(c));
  }
}

}  // namespace peregrine::decision_internal
