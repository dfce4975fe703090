// AgentRegistry: the controller's view of every connected agent, translated from the wire
// (peregrine.v1) into the decision engine's plain observations, plus the commands in flight.
//
// The RPC layer (agent_service.h) feeds it stream events; the job controller reads
// Observe(), publishes each pod's desired role and assignment with SetDesired() (the
// RegisterAck an agent gets is built from it) and sends commands with Send(). A command
// stays pending until its result arrives; pending commands are re-sent when the agent
// registers again (agents execute each id once, so resending is safe); a result is kept
// only for a command pending for that agent (others are dropped and counted), so nothing
// an agent sends grows the registry.
//
// Agent identity (docs/security.md): with an agent key set, a Register must carry the
// claimed pod's credential (agent_credentials.h) or, failing that, a bootstrap token the
// bootstrap verifier accepts for that pod; the ack then carries the pod's credential and
// the job's checkpoint data-channel token (DeriveDataToken, the same for every pod). Only
// pods the job controller published (SetDesired) may register; a second registration of
// a pod ends the older stream; a job has at most MaxAgentStreams() open streams.
//
// Thread-safe: every method may be called from any thread. Sinks are called with the
// registry lock released.
#ifndef PEREGRINE_CONTROLLER_AGENT_REGISTRY_H_
#define PEREGRINE_CONTROLLER_AGENT_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/agent_credentials.h"
#include "controller/agent_wire.h"
#include "controller/core/job_state.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

// Where the registry writes messages for one stream. Implemented by the RPC reactor.
class AgentStreamSink {
 public:
  virtual ~AgentStreamSink() = default;
  // Queues a message; dropped silently once the stream has closed.
  virtual void Send(const v1::ControllerMessage& message) = 0;
  // Ends the stream with `status` once the messages queued before it went out; a no-op
  // once the stream has closed.
  virtual void End(const absl::Status& /*status*/) {}
};

// "namespace/name".
std::string JobKey(const std::string& ns, const std::string& name);

// Command results kept per agent (the newest).
inline constexpr size_t kMaxCommandResults = 64;
// Checkpoint store events kept per agent (the newest).
inline constexpr size_t kMaxCheckpointEvents = 64;
// Open agent streams a job may have beyond its desired pods (slots and standbys): room
// for old pods still connected while their replacements register.
inline constexpr size_t kAgentStreamMargin = 4;

class AgentRegistry {
 public:
  struct JobBinding {
    TrainingJobSpec spec;
    std::string job_uid;  // bound into the pods' credentials ("" where there is none)
  };

  explicit AgentRegistry(std::string controller_id) : controller_id_(std::move(controller_id)) {}

  // Job controller side.
  void BindJob(const std::string& job_key, JobBinding binding);
  // Also sends a CheckpointCommit to each connected agent of the desired attempt whose
  // committed checkpoint step changed since it was last told.
  void SetDesired(const std::string& job_key, const std::map<std::string, DesiredAgent>& desired);
  std::vector<AgentObservation> Observe(const std::string& job_key) const;
  // The job's connected agents (Observe's count of `connected`, without copying them).
  int ConnectedCount(const std::string& job_key) const;
  // Sends a command (or re-sends it if it is not pending yet); a no-op while the pod's
  // agent is not connected: it is sent when it registers.
  void Send(const std::string& job_key, const CommandToSend& command, int64_t now);
  // Re-sends commands that have waited longer than `overdue_ns` for a result (a message
  // lost on a broken stream); agents execute each id once, so this is always safe.
  void ResendOverdue(const std::string& job_key, int64_t now, int64_t overdue_ns);
  // The pod is gone for good: forget its agent.
  void Forget(const std::string& job_key, const std::string& pod);
  // The job is gone for good (deleted): every connected agent of it gets a Reject naming
  // the reason and its stream is ended (kNotFound), and nothing of the job is kept: an
  // agent that re-registers is refused as for an unknown job. A no-op for an unknown job.
  void UnbindJob(const std::string& job_key, const std::string& reason);
  // Jobs the registry holds anything for (bound, desired or agents), for tests.
  size_t JobCountForTest() const;
  // Called (without locks held) whenever something a job's decision depends on changed.
  // A heartbeat that changed only progress (steps, losses, iteration times, last_seen)
  // calls it only when no agent message of the job called it within the last heartbeat
  // interval: the decision sees progress at most one interval late, and a job of N
  // agents is not decided N times a second. Registrations, disconnects, events, command
  // results and any other change a heartbeat carries (attempt, phase, exits, non-OK
  // inspections, checkpoint report, NCCL profiles) call it at once.
  void SetChangeCallback(std::function<void(const std::string& job_key)> callback);
  // Recent process exits with their log tails, for the incident timeline.
  std::vector<std::string> RecentExitSummaries(const std::string& job_key, size_t max) const;
  // The interval the acks tell agents to heartbeat at (and progress's wake-up interval,
  // see SetChangeCallback). Set before agents connect.
  void SetHeartbeatIntervalMs(uint32_t ms) { heartbeat_interval_ms_ = ms; }
  // The agent key (64 hex characters) agents' credentials derive from; empty (the
  // default) authenticates nobody and accepts any registration. kInvalidArgument for a
  // malformed key (nothing changes). Set before agents connect.
  absl::Status SetAgentKey(std::string key);
  // Checks bootstrap tokens (a Register whose bearer token is not the pod's credential);
  // null (the default): only credentials are accepted. Set before agents connect.
  void SetBootstrapVerifier(std::shared_ptr<AgentBootstrapVerifier> verifier);
  // The most open streams `job_key` may have: its desired pods + kAgentStreamMargin.
  size_t MaxAgentStreams(const std::string& job_key) const;
  // Command results dropped because no such command was pending for the agent.
  uint64_t DroppedCommandResults() const;

  // RPC side. OnRegister returns the ack to send, or an error to close the stream with
  // (kUnauthenticated: neither the pod's credential nor an accepted bootstrap token;
  // kUnavailable: the bootstrap token could not be checked now; kNotFound: unknown job or
  // a pod the job controller did not publish; kResourceExhausted: the job has
  // MaxAgentStreams() open streams; kInvalidArgument: malformed). An older stream of the
  // same pod is ended with kAborted ("replaced by a newer registration"). May block on
  // the bootstrap verifier; call it without locks held.
  absl::StatusOr<v1::RegisterAck> OnRegister(std::shared_ptr<AgentStreamSink> sink, const std::string& bearer_token,
                                             const v1::Register& reg, int64_t now);
  // kInvalidArgument for a message that does not fit (the caller answers with Reject).
  absl::Status OnMessage(const AgentStreamSink* sink, const v1::AgentMessage& message, int64_t now);
  void OnDisconnect(const AgentStreamSink* sink, int64_t now);

  int ConnectedCountForTest() const;

 private:
  struct CommitSent {
    uint64_t attempt = 0;
    uint64_t committed_step = 0;
    std::vector<std::string> backup_addresses;  // the plan's backup_to, in order ("": unknown)
    bool operator==(const CommitSent&) const = default;
  };
  struct AgentRecord {
    std::shared_ptr<AgentStreamSink> sink;  // null while disconnected
    AgentObservation obs;
    std::map<std::string, v1::Command> pending;  // id -> command
    std::map<std::string, int64_t> pending_sent_at;  // id -> when last sent
    std::vector<std::string> recent_exit_summaries;
    std::vector<std::string> result_order;  // command_results ids, oldest first
    // What the agent was last told of its attempt's checkpoint plan (by its ack, the
    // command that began the attempt, or a CheckpointCommit).
    CommitSent commit_sent;
  };
  struct JobRecord {
    JobBinding binding;
    std::map<std::string, DesiredAgent> desired;
    std::map<int, std::string> pod_of_slot;     // the active pods of `desired`, by slot
    std::map<std::string, AgentRecord> agents;  // by pod
    size_t open_streams = 0;                    // agents with a sink (by_sink_ entries of the job)
    std::optional<int64_t> notified_at;         // when an agent message last woke the job
  };
  struct SinkEntry {
    std::string job_key;
    JobRecord* job;
    AgentRecord* record;
  };
  AgentRecord* FindBySink(const AgentStreamSink* sink, std::string* job_key, JobRecord** job = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slot -> the data address of the agent of the pod desired in that slot, for the slots
  // `assignment`'s checkpoint plan names (its backup and restore peers): O(peers log N),
  // not O(N), since it runs for every registration ack and command under the lock.
  static std::map<int, std::string> DataAddresses(const JobRecord& job, const AssignmentSpec& assignment);
  // The data address of the agent of the pod desired in `slot` ("" when none is known).
  static const std::string& AddressOfSlot(const JobRecord& job, int slot);
  // What an agent given `assignment` now knows of its checkpoint plan (the backup holders'
  // addresses as AddressOfSlot has them).
  static CommitSent CommitOf(const JobRecord& job, const AssignmentSpec& assignment);
  void Notify(const std::string& job_key);

  const std::string controller_id_;
  uint32_t heartbeat_interval_ms_ = 1000;
  mutable absl::Mutex mu_;
  std::string agent_key_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<AgentBootstrapVerifier> bootstrap_verifier_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_results_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const AgentStreamSink*, SinkEntry> by_sink_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_change_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_REGISTRY_H_
