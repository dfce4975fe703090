#include "agent/checkpoint/agent_checkpoints.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/restore_fetch.h"

namespace peregrine::checkpoint {

namespace v1 = ::peregrine::v1;

namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(200);

// The ranks the store configures for a launch: a plan that saves (interval_steps) or
// restores needs the ranks' directories; otherwise the store holds for others only.
std::vector<uint32_t> LaunchRanks(const v1::CheckpointPlan& plan, const std::vector<uint32_t>& ranks) {
  if (plan.interval_steps() > 0 || plan.restore_step() > 0) return ranks;
  return {};
}

// Whether a message of `attempt` concerns the training that runs now.
bool ForRunningAttempt(uint64_t attempt, std::optional<uint64_t> running_attempt) {
  return running_attempt.has_value() && *running_attempt == attempt;
}

}  // namespace

std::string FormatDataAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

absl::StatusOr<std::unique_ptr<AgentCheckpoints>> AgentCheckpoints::Create(const AgentCheckpointsOptions& options) {
  if (options.root.empty()) return std::unique_ptr<AgentCheckpoints>();
  std::unique_ptr<AgentCheckpoints> parts(new AgentCheckpoints());
  ShardStoreOptions store_options;
  store_options.root = options.root;
  store_options.job_namespace = options.job_namespace;
  store_options.job_name = options.job_name;
  store_options.pod_name = options.pod_name;
  absl::StatusOr<std::unique_ptr<ShardStore>> store = ShardStore::Create(store_options);
  if (!store.ok()) return store.status();
  parts->store_ = std::move(*store);
  PeerServerOptions server_options;
  server_options.bind = options.data_bind;
  server_options.port = options.data_port;
  server_options.token = &parts->token_;
  server_options.store = parts->store_.get();
  absl::StatusOr<std::unique_ptr<PeerServer>> server = PeerServer::Start(server_options);
  if (!server.ok()) return server.status();
  parts->server_ = std::move(*server);
  std::string host = options.data_advertise;
  if (host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0) host = name;
    if (host.empty()) host = "localhost";
  }
  parts->data_address_ = FormatDataAddress(host, parts->server_->port());
  parts->sender_ =
      std::make_unique<BackupSender>(BackupSenderOptions{parts->store_.get(), &parts->token_, options.clock});
  parts->persist_ = std::make_unique<PersistWriter>(parts->store_.get());
  return parts;
}

AgentCheckpoints::~AgentCheckpoints() { Shutdown(); }

void AgentCheckpoints::Shutdown() {
  persist_.reset();
  sender_.reset();
  server_.reset();
  if (store_) store_->RemoveAreaIfEmpty();
  store_.reset();
}

// The store finishes new shards, prunes and reports; its events go out at once; the
// backup sender and the writer look for a new stored step.
std::vector<v1::CheckpointEvent> AgentCheckpoints::Poll(absl::Time now) {
  if (now < next_poll_) return {};
  next_poll_ = now + kPollInterval;
  std::vector<v1::CheckpointEvent> events = store_->Poll();
  sender_->Wake();
  persist_->Wake();
  return events;
}

// A failed restore starts nothing: RESTORE_FAILED events name the rank and step, and the
// start fails, so the controller falls back to an older step. Persisted steps newer than
// the restored one belong to the abandoned timeline. The closing store pass computes the
// allowance of this launch.
PreparedLaunch AgentCheckpoints::PrepareLaunch(const CheckpointLaunch& launch) {
  PreparedLaunch out;
  v1::CheckpointPlan plan;
  if (!plan.ParseFromString(launch.plan)) {
    out.status = absl::InvalidArgumentError("assignment.checkpoint does not parse");
    return out;
  }
  const std::vector<uint32_t> ranks = LaunchRanks(plan, launch.ranks);
  out.status = store_->Configure(launch.slot, ranks, launch.ranks_per_slot, plan);
  if (!out.status.ok()) return out;
  if (plan.restore_step() > 0) {
    const std::vector<v1::CheckpointPeerAddress> holders(plan.restore_from().begin(), plan.restore_from().end());
    RestoreOutcome restored =
        RestoreShards(*store_, launch.slot, ranks, plan.restore_step(), holders, token_.Get(), plan.persist_dir());
    out.events = std::move(restored.events);
    out.status = restored.status;
    if (!out.status.ok()) return out;
    persist_->DiscardNewerThan(plan.restore_step());
  }
  for (v1::CheckpointEvent& e : store_->Poll()) out.events.push_back(std::move(e));
  return out;
}

absl::Status AgentCheckpoints::ApplyAssignment(const v1::Assignment& assignment,
                                               std::optional<uint64_t> running_attempt) {
  if (!assignment.has_checkpoint() || assignment.ranks().empty() ||
      !ForRunningAttempt(assignment.attempt(), running_attempt)) {
    return absl::OkStatus();
  }
  // The ranks as at launch, less a restore's (over once training runs).
  std::vector<uint32_t> ranks;
  if (assignment.checkpoint().interval_steps() > 0) {
    for (const v1::RankInfo& r : assignment.ranks()) ranks.push_back(r.global_rank());
  }
  return store_->Configure(assignment.machine_index(), ranks, assignment.layout().gpus_per_machine(),
                           assignment.checkpoint());
}

void AgentCheckpoints::ApplyCommit(const v1::CheckpointCommit& commit, std::optional<uint64_t> running_attempt) {
  if (!ForRunningAttempt(commit.attempt(), running_attempt)) return;
  if (commit.committed_step() > 0) store_->SetCommittedStep(commit.committed_step());
  if (!commit.backup_to().empty() && store_->SetBackupPeers(commit.backup_to())) sender_->Wake();
}

}  // namespace peregrine::checkpoint
