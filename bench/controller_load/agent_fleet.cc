#include "bench/controller_load/agent_fleet.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <queue>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "peregrine/v1/agent.grpc.pb.h"

// How the fleet runs 12,500 agents on a few threads.
//
// Each agent is an `Agent` record (its identity, credential, the attempt it trains, its
// current stream) and one recurring entry in one ticker's time-ordered queue. When the
// entry comes due the ticker connects the agent if it has no stream (after
// its reconnect backoff since the last one ended), else sends a heartbeat if the stream is
// registered, and schedules the entry again one heartbeat interval later. Everything the
// controller sends is handled in the stream's read reaction, on gRPC's callback threads.
//
// A stream (`AgentStream`, a ClientBidiReactor) always has a read outstanding until it
// ends, so gRPC calls OnDone only after that read failed; writes are started only while
// the read side is open (`closed_` under `write_mu_`), one at a time, from a small
// queue in which a newer heartbeat supersedes queued ones (peregrine-agent's outbox
// drops the oldest heartbeats the same way). No gRPC call (StartWrite, StartRead,
// StartCall, TryCancel) is made with one of our locks held: gRPC may run a reaction of
// the same stream inline on the calling thread, and the reaction takes those locks.
// A stream is owned by shared pointers (the agent's, and its own until OnDone), so it
// can be used outside the agent's lock.
//
// Where the last reference to a channel is dropped matters. gRPC 1.51 (Debian's) runs
// client callbacks on a completion queue shared by every channel of the process, polled
// by its own "nexting" threads; the channel that drops its last reference stops that
// queue and joins those threads. On one of those threads (an OnDone that destroys the
// stream, whose ClientContext holds the channel, and the agent, which holds it too) that
// is a thread joining itself and freeing the queue it is still polling: the heap
// corruption the load test hit at shutdown in about one run in four. So a stream never
// holds the last reference: a removed agent stays in the fleet's `retired_` list until
// its streams are destroyed (counted by a member destroyed last), and the tickers, or
// Shutdown once every stream is gone, release it on their own threads.

namespace peregrine::loadtest {

namespace v1 = ::peregrine::v1;

namespace {

constexpr size_t kMaxQueuedWrites = 4;
constexpr size_t kMaxExecutedIds = 64;

class AgentStream;

struct Agent {
  SimulatedAgentParams params;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::AgentService::Stub> stub;
  absl::Time start_time;

  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<AgentStream> stream ABSL_GUARDED_BY(mu);  // until its OnDone
  bool registered ABSL_GUARDED_BY(mu) = false;        // the current stream got its ack
  absl::Time reconnect_after ABSL_GUARDED_BY(mu);
  std::string credential ABSL_GUARDED_BY(mu);
  bool active ABSL_GUARDED_BY(mu) = true;
  uint64_t attempt ABSL_GUARDED_BY(mu) = 0;
  uint64_t resume_step ABSL_GUARDED_BY(mu) = 0;
  absl::Time attempt_start ABSL_GUARDED_BY(mu);
  v1::TrainingPhase phase ABSL_GUARDED_BY(mu) = v1::TRAINING_PHASE_IDLE;
  v1::Assignment assignment ABSL_GUARDED_BY(mu);
  std::deque<std::string> executed ABSL_GUARDED_BY(mu);
  absl::Duration heartbeat_interval ABSL_GUARDED_BY(mu) = absl::Seconds(1);
  absl::Duration backoff ABSL_GUARDED_BY(mu);  // the next reconnect's base wait
  uint64_t jitter_state ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace

class AgentFleet::Impl {
 public:
  explicit Impl(AgentFleetOptions options);
  ~Impl() { Shutdown(); }

  absl::Status Add(SimulatedAgentParams params);
  bool Remove(const std::string& pod);
  void Shutdown();
  FleetCounts Counts() const;
  std::vector<AgentSnapshot> Snapshot() const;

  // Called by the streams.
  // What to send in reply to a message of the controller (none when `stream` is no
  // longer the agent's).
  std::vector<v1::AgentMessage> OnAck(Agent& agent, const AgentStream* stream, const v1::RegisterAck& ack)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent.mu);
  std::vector<v1::AgentMessage> OnCommand(Agent& agent, const AgentStream* stream, const v1::Command& command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent.mu);
  void OnStreamDone(Agent& agent, const AgentStream* stream, const grpc::Status& status);
  // A stream object is destroyed, with its context and its reference to the agent.
  void OnStreamDestroyed();
  void CountReject() { rejects_.fetch_add(1, std::memory_order_relaxed); }
  void CountDroppedHeartbeat() { dropped_heartbeats_.fetch_add(1, std::memory_order_relaxed); }

 private:
  class Ticker;
  // One due entry: connect or heartbeat. Returns when to come back (InfiniteFuture: the
  // agent is stopped, drop it).
  absl::Time Tick(const std::shared_ptr<Agent>& agent, absl::Time now);
  // A new stream for the agent, with its Register; the caller starts it unlocked.
  std::shared_ptr<AgentStream> NewStream(const std::shared_ptr<Agent>& agent, v1::AgentMessage* reg,
                                         std::string* bearer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);
  void BeginAttempt(Agent& agent, const v1::Assignment& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent.mu);
  v1::AgentMessage Heartbeat(Agent& agent, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent.mu);
  v1::TrainingState Training(Agent& agent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent.mu);
  uint64_t Step(const Agent& agent, absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(agent.mu);
  std::shared_ptr<grpc::Channel> ChannelFor(size_t index);
  // Releases the retired agents no stream refers to any more, on the calling thread.
  void ReleaseRetired();

  const AgentFleetOptions options_;
  std::vector<std::unique_ptr<Ticker>> tickers_;

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<Agent>> live_ ABSL_GUARDED_BY(mu_);  // by pod
  // Removed agents, held until no stream refers to them (see the top of this file).
  std::vector<std::shared_ptr<Agent>> retired_ ABSL_GUARDED_BY(mu_);
  size_t added_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<grpc::Channel>> shared_channels_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex streams_mu_;
  int open_streams_ ABSL_GUARDED_BY(streams_mu_) = 0;  // stream objects not yet destroyed

  std::atomic<uint64_t> heartbeats_{0}, commands_{0}, rejects_{0}, streams_started_{0}, streams_failed_{0},
      dropped_heartbeats_{0};
};

namespace {

class AgentStream final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
 public:
  AgentStream(AgentFleet::Impl* fleet, std::shared_ptr<Agent> agent)
      : destroyed_(fleet), agent_(std::move(agent)), fleet_(fleet) {}

  // Opens the stream with `reg` as its first message; the stream keeps itself alive
  // until OnDone.
  void Start(const std::shared_ptr<AgentStream>& self, const std::string& bearer, v1::AgentMessage reg) {
    self_ = self;
    if (!bearer.empty()) context_.AddMetadata("authorization", absl::StrCat("Bearer ", bearer));
    agent_->stub->async()->Connect(&context_, this);
    Send(std::move(reg));
    StartRead(&in_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }

  // Queues a message; dropped once the stream's read side has ended.
  void Send(v1::AgentMessage message) {
    const v1::AgentMessage* next = nullptr;
    {
      absl::MutexLock lock(&write_mu_);
      if (closed_) return;
      if (message.has_heartbeat() && queue_.size() >= kMaxQueuedWrites) {
        // The front may be in flight; supersede the oldest queued heartbeat after it.
        for (auto it = std::next(queue_.begin()); it != queue_.end(); ++it) {
          if (it->has_heartbeat()) {
            queue_.erase(it);
            fleet_->CountDroppedHeartbeat();
            break;
          }
        }
      }
      queue_.push_back(std::move(message));
      if (!writing_) {
        writing_ = true;
        next = &queue_.front();
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void OnWriteDone(bool ok) override {
    const v1::AgentMessage* next = nullptr;
    {
      absl::MutexLock lock(&write_mu_);
      queue_.pop_front();
      if (ok && !closed_ && !queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (!ok) queue_.clear();
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&write_mu_);
      closed_ = true;
      return;
    }
    std::vector<v1::AgentMessage> replies;
    {
      absl::MutexLock lock(&agent_->mu);
      switch (in_.body_case()) {
        case v1::ControllerMessage::kRegisterAck:
          replies = fleet_->OnAck(*agent_, this, in_.register_ack());
          break;
        case v1::ControllerMessage::kCommand:
          replies = fleet_->OnCommand(*agent_, this, in_.command());
          break;
        case v1::ControllerMessage::kReject:
          fleet_->CountReject();
          break;
        default:
          break;  // checkpoint commits: no checkpoint store here
      }
    }
    for (v1::AgentMessage& m : replies) Send(std::move(m));
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    fleet_->OnStreamDone(*agent_, this, status);
    self_.reset();  // may delete this
  }

 private:
  // Declared first, so destroyed last: tells the fleet once the context and the agent
  // reference (both hold the channel) are gone.
  struct DestroyedSignal {
    explicit DestroyedSignal(AgentFleet::Impl* f) : fleet(f) {}
    ~DestroyedSignal() { fleet->OnStreamDestroyed(); }
    AgentFleet::Impl* const fleet;
  } destroyed_;
  const std::shared_ptr<Agent> agent_;  // declared before context_: outlives it
  AgentFleet::Impl* const fleet_;
  std::shared_ptr<AgentStream> self_;
  grpc::ClientContext context_;
  v1::ControllerMessage in_;
  absl::Mutex write_mu_;
  bool closed_ ABSL_GUARDED_BY(write_mu_) = false;
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;
  // Front: in flight while writing_. A list: erasing keeps the front's address.
  std::list<v1::AgentMessage> queue_ ABSL_GUARDED_BY(write_mu_);
};

}  // namespace

// One thread and its agents' due times.
class AgentFleet::Impl::Ticker {
 public:
  explicit Ticker(Impl* fleet) : fleet_(fleet), thread_([this] { Loop(); }) {}
  ~Ticker() { Stop(); }

  void Schedule(absl::Time at, std::shared_ptr<Agent> agent) {
    absl::MutexLock lock(&mu_);
    queue_.push(Entry{at, std::move(agent)});
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    queue_ = {};
  }

 private:
  struct Entry {
    absl::Time at;
    std::shared_ptr<Agent> agent;
    bool operator<(const Entry& o) const { return at > o.at; }  // earliest on top
  };

  void Loop() {
    std::vector<Entry> due;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || (!queue_.empty() && queue_.top().at <= absl::Now());
        };
        const absl::Time wake = queue_.empty() ? absl::Now() + absl::Milliseconds(50) : queue_.top().at;
        mu_.AwaitWithDeadline(absl::Condition(&ready), std::min(wake, absl::Now() + absl::Milliseconds(50)));
        if (stop_) return;
        const absl::Time now = absl::Now();
        while (!queue_.empty() && queue_.top().at <= now) {
          due.push_back(queue_.top());
          queue_.pop();
        }
      }
      const absl::Time now = absl::Now();
      for (Entry& e : due) {
        const absl::Time next = fleet_->Tick(e.agent, now);
        if (next != absl::InfiniteFuture()) {
          absl::MutexLock lock(&mu_);
          queue_.push(Entry{next, std::move(e.agent)});
        }
      }
      due.clear();
      if (now >= next_release_) {
        fleet_->ReleaseRetired();
        next_release_ = now + absl::Seconds(1);
      }
    }
  }

  Impl* const fleet_;
  absl::Time next_release_ = absl::InfinitePast();  // the loop's own
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::priority_queue<Entry> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

AgentFleet::Impl::Impl(AgentFleetOptions options) : options_(std::move(options)), rng_(options_.seed) {
  const int n = std::max(1, options_.ticker_threads);
  for (int i = 0; i < n; ++i) tickers_.push_back(std::make_unique<Ticker>(this));
}

absl::Status AgentFleet::Impl::Add(SimulatedAgentParams params) {
  auto agent = std::make_shared<Agent>();
  agent->params = std::move(params);
  agent->start_time = absl::Now();
  size_t index;
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::FailedPreconditionError("the agent fleet is shut down");
    if (live_.count(agent->params.pod) > 0) {
      return absl::AlreadyExistsError(absl::StrCat("pod ", agent->params.pod, " already has an agent"));
    }
    index = added_++;
    const int64_t spread_us = std::max<int64_t>(1, absl::ToInt64Microseconds(options_.connect_spread));
    delay = absl::Microseconds(static_cast<int64_t>(rng_() % static_cast<uint64_t>(spread_us)));
    live_[agent->params.pod] = agent;
  }
  agent->channel = ChannelFor(index);
  agent->stub = v1::AgentService::NewStub(agent->channel);
  {
    absl::MutexLock lock(&agent->mu);
    agent->active = !agent->params.standby;
    agent->backoff = options_.backoff_initial;
    agent->jitter_state = options_.seed * 0x9e3779b97f4a7c15ULL + index;
  }
  tickers_[index % tickers_.size()]->Schedule(absl::Now() + delay, std::move(agent));
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> AgentFleet::Impl::ChannelFor(size_t index) {
  grpc::ChannelArguments args;
  // The agent's own settings (agent/controller_link.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5 * 60 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  // A subchannel pool of its own: channels to the same target do not share a connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const size_t per = static_cast<size_t>(std::max(1, options_.streams_per_connection));
  if (per == 1) return grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args);
  absl::MutexLock lock(&mu_);
  const size_t slot = index / per;
  if (shared_channels_.size() <= slot) shared_channels_.resize(slot + 1);
  if (!shared_channels_[slot]) {
    shared_channels_[slot] = grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args);
  }
  return shared_channels_[slot];
}

bool AgentFleet::Impl::Remove(const std::string& pod) {
  std::shared_ptr<Agent> agent;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(pod);
    if (it == live_.end()) return false;
    agent = it->second;
    retired_.push_back(std::move(it->second));
    live_.erase(it);
  }
  std::shared_ptr<AgentStream> stream;
  {
    absl::MutexLock lock(&agent->mu);
    agent->stopped = true;
    stream = agent->stream;
  }
  if (stream) stream->Cancel();
  return true;
}

void AgentFleet::Impl::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  for (auto& t : tickers_) t->Stop();
  std::vector<std::string> pods;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pod, agent] : live_) pods.push_back(pod);
  }
  for (const std::string& pod : pods) Remove(pod);
  // Every stream refers to this object until it is destroyed: wait for all of them.
  {
    absl::MutexLock lock(&streams_mu_);
    auto none_open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(streams_mu_) { return open_streams_ == 0; };
    if (!streams_mu_.AwaitWithTimeout(absl::Condition(&none_open), absl::Minutes(2))) {
      std::fprintf(stderr, "agent fleet: %d stream(s) still open 2 minutes after they were cancelled\n", open_streams_);
      std::abort();  // their reactors would outlive the fleet
    }
  }
  // No stream is left: the channels go here, on the caller's thread.
  std::vector<std::shared_ptr<Agent>> retired;
  std::vector<std::shared_ptr<grpc::Channel>> shared;
  {
    absl::MutexLock lock(&mu_);
    retired.swap(retired_);
    shared.swap(shared_channels_);
  }
}

void AgentFleet::Impl::ReleaseRetired() {
  // Declared before the lock, so the agents (and their channels, which may take gRPC's
  // locks as they go) are released after it.
  std::vector<std::shared_ptr<Agent>> released;
  absl::MutexLock lock(&mu_);
  // A count of 1 is exact here: only this list holds the agent, and nothing can take a
  // new reference to it (no weak pointers, no other list).
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->use_count() == 1) {
      released.push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Time AgentFleet::Impl::Tick(const std::shared_ptr<Agent>& agent, absl::Time now) {
  std::shared_ptr<AgentStream> stream;
  std::shared_ptr<AgentStream> new_stream;
  v1::AgentMessage message;
  std::string bearer;
  absl::Time next;
  {
    absl::MutexLock lock(&agent->mu);
    if (agent->stopped) return absl::InfiniteFuture();
    if (agent->stream == nullptr) {
      if (now < agent->reconnect_after) return agent->reconnect_after;
      new_stream = NewStream(agent, &message, &bearer);
    } else if (agent->registered) {
      stream = agent->stream;
      message = Heartbeat(*agent, now);
    }
    next = now + agent->heartbeat_interval;
  }
  if (new_stream) new_stream->Start(new_stream, bearer, std::move(message));
  if (stream) stream->Send(std::move(message));
  return next;
}

std::shared_ptr<AgentStream> AgentFleet::Impl::NewStream(const std::shared_ptr<Agent>& agent, v1::AgentMessage* message,
                                                         std::string* bearer) {
  v1::Register* reg = message->mutable_register_();
  reg->set_job_namespace(agent->params.job_namespace);
  reg->set_job_name(agent->params.job_name);
  reg->set_pod_name(agent->params.pod);
  reg->set_machine_id(agent->params.machine_id);
  reg->set_role(agent->active ? v1::AGENT_ROLE_ACTIVE : v1::AGENT_ROLE_STANDBY);
  if (agent->attempt > 0) *reg->mutable_assignment() = agent->assignment;
  reg->set_agent_version("controller-load-generator");
  reg->set_agent_start_time(absl::ToUnixNanos(agent->start_time));
  *reg->mutable_training() = Training(*agent);
  for (const std::string& id : agent->executed) reg->add_executed_command_ids(id);
  reg->mutable_self_check()->set_passed(true);
  reg->mutable_self_check()->set_checked_at(absl::ToUnixNanos(agent->start_time));
  {
    absl::MutexLock lock(&streams_mu_);
    ++open_streams_;
  }
  streams_started_.fetch_add(1, std::memory_order_relaxed);
  agent->stream = std::make_shared<AgentStream>(this, agent);
  agent->registered = false;
  // The pod's bootstrap token until an ack gave the agent its credential.
  *bearer = agent->credential.empty() ? agent->params.bootstrap_token : agent->credential;
  return agent->stream;
}

std::vector<v1::AgentMessage> AgentFleet::Impl::OnAck(Agent& agent, const AgentStream* stream,
                                                      const v1::RegisterAck& ack) {
  if (agent.stream.get() != stream) return {};
  agent.registered = true;
  agent.backoff = options_.backoff_initial;
  if (!ack.agent_credential().empty()) agent.credential = ack.agent_credential();
  if (ack.heartbeat_interval_ms() > 0) agent.heartbeat_interval = absl::Milliseconds(ack.heartbeat_interval_ms());
  if (ack.role() == v1::AGENT_ROLE_ACTIVE) {
    BeginAttempt(agent, ack.assignment());
  } else if (ack.role() == v1::AGENT_ROLE_STANDBY) {
    agent.active = false;
  }
  std::vector<v1::AgentMessage> replies;
  replies.push_back(Heartbeat(agent, absl::Now()));
  return replies;
}

std::vector<v1::AgentMessage> AgentFleet::Impl::OnCommand(Agent& agent, const AgentStream* stream,
                                                          const v1::Command& c) {
  if (agent.stream.get() != stream) return {};
  commands_.fetch_add(1, std::memory_order_relaxed);
  if (c.has_restart_in_place()) BeginAttempt(agent, c.restart_in_place().assignment());
  if (c.has_activate()) BeginAttempt(agent, c.activate().assignment());
  if (c.has_hot_update() && c.hot_update().urgent()) BeginAttempt(agent, c.hot_update().assignment());
  if (c.has_stop()) agent.phase = v1::TRAINING_PHASE_EXITED;
  agent.executed.push_back(c.id());
  if (agent.executed.size() > kMaxExecutedIds) agent.executed.pop_front();
  v1::AgentMessage result;
  result.mutable_command_result()->set_command_id(c.id());
  result.mutable_command_result()->mutable_status()->set_code(0);
  result.mutable_command_result()->set_finished_at(absl::ToUnixNanos(absl::Now()));
  std::vector<v1::AgentMessage> replies;
  replies.push_back(std::move(result));
  return replies;
}

void AgentFleet::Impl::OnStreamDone(Agent& agent, const AgentStream* stream, const grpc::Status& status) {
  {
    absl::MutexLock lock(&agent.mu);
    if (agent.stream.get() == stream) {
      agent.stream = nullptr;
      agent.registered = false;
      // peregrine-agent's ReconnectBackoff::Next: base * [0.5, 1), base doubling to max.
      agent.jitter_state = agent.jitter_state * 6364136223846793005ULL + 1442695040888963407ULL;
      const double uniform01 = static_cast<double>(agent.jitter_state >> 11) / 9007199254740992.0;
      const absl::Duration base = std::min(agent.backoff, options_.backoff_max);
      agent.backoff = std::min(agent.backoff * 2, options_.backoff_max);
      agent.reconnect_after = absl::Now() + base * (0.5 + 0.5 * uniform01);
    }
    if (!agent.stopped && !status.ok()) streams_failed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void AgentFleet::Impl::OnStreamDestroyed() {
  absl::MutexLock lock(&streams_mu_);
  --open_streams_;
}

void AgentFleet::Impl::BeginAttempt(Agent& agent, const v1::Assignment& a) {
  if (a.attempt() == 0 || a.attempt() == agent.attempt) return;
  agent.assignment = a;
  agent.attempt = a.attempt();
  agent.resume_step = a.resume_step();
  agent.attempt_start = absl::Now();
  agent.phase = v1::TRAINING_PHASE_RUNNING;
  agent.active = true;
}

uint64_t AgentFleet::Impl::Step(const Agent& agent, absl::Time now) const {
  if (agent.attempt == 0) return 0;
  if (agent.phase != v1::TRAINING_PHASE_RUNNING) return agent.resume_step;
  absl::Duration rest;  // IDivDuration needs somewhere to put it
  const int64_t steps = absl::IDivDuration(now - agent.attempt_start, options_.step_time, &rest);
  return agent.resume_step + static_cast<uint64_t>(std::max<int64_t>(0, steps));
}

v1::TrainingState AgentFleet::Impl::Training(Agent& agent) {
  v1::TrainingState t;
  t.set_phase(agent.phase);
  t.set_attempt(agent.attempt);
  if (agent.attempt > 0) {
    for (const v1::RankInfo& r : agent.assignment.ranks()) {
      v1::ProcessState* p = t.add_processes();
      p->set_global_rank(r.global_rank());
      p->set_pid(static_cast<int32_t>(100000 + r.local_rank()));
      p->set_running(agent.phase == v1::TRAINING_PHASE_RUNNING);
    }
    *t.mutable_code() = agent.assignment.code();
  }
  return t;
}

v1::AgentMessage AgentFleet::Impl::Heartbeat(Agent& agent, absl::Time now) {
  heartbeats_.fetch_add(1, std::memory_order_relaxed);
  v1::AgentMessage message;
  v1::Heartbeat* hb = message.mutable_heartbeat();
  hb->set_sent_at(absl::ToUnixNanos(now));
  *hb->mutable_training() = Training(agent);
  if (agent.attempt > 0 && agent.phase == v1::TRAINING_PHASE_RUNNING) {
    const uint64_t step = Step(agent, now);
    const double step_s = absl::ToDoubleSeconds(options_.step_time);
    absl::Duration rest;
    const uint32_t in_window =
        static_cast<uint32_t>(std::max<int64_t>(1, absl::IDivDuration(agent.heartbeat_interval, options_.step_time, &rest)));
    for (const v1::RankInfo& r : agent.assignment.ranks()) {
      v1::IterationSummary* it = hb->add_iterations();
      it->set_global_rank(r.global_rank());
      it->set_last_completed_step(step);
      it->set_last_loss(2.0 + 1.0 / static_cast<double>(step + 1));
      it->set_last_grad_norm(1.0);
      it->set_mean_iteration_seconds(step_s);
      it->set_steps_in_window(in_window);
      it->set_last_step_time(absl::ToUnixNanos(now));
    }
  }
  // The inspections every agent runs (agent/inspection/), all healthy.
  for (const char* kind : {"gpu", "xid", "network", "host"}) {
    v1::InspectionResult* r = hb->add_inspections();
    r->set_kind(kind);
    r->set_status(v1::INSPECTION_STATUS_OK);
    r->set_summary("ok");
    r->set_observed_at(absl::ToUnixNanos(now));
  }
  return message;
}

FleetCounts AgentFleet::Impl::Counts() const {
  FleetCounts c;
  std::vector<std::shared_ptr<Agent>> agents;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pod, agent] : live_) agents.push_back(agent);
  }
  c.agents = static_cast<int>(agents.size());
  for (const auto& a : agents) {
    absl::MutexLock lock(&a->mu);
    c.connected += a->registered && a->stream != nullptr ? 1 : 0;
  }
  {
    absl::MutexLock lock(&streams_mu_);
    c.open_streams = open_streams_;
  }
  c.heartbeats = heartbeats_.load();
  c.commands = commands_.load();
  c.rejects = rejects_.load();
  c.streams_started = streams_started_.load();
  c.streams_failed = streams_failed_.load();
  c.dropped_heartbeats = dropped_heartbeats_.load();
  return c;
}

std::vector<AgentSnapshot> AgentFleet::Impl::Snapshot() const {
  std::vector<std::shared_ptr<Agent>> agents;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pod, agent] : live_) agents.push_back(agent);
  }
  std::vector<AgentSnapshot> out;
  const absl::Time now = absl::Now();
  for (const auto& a : agents) {
    absl::MutexLock lock(&a->mu);
    out.push_back(AgentSnapshot{a->params.pod, a->stopped, a->registered && a->stream != nullptr, a->active, a->attempt,
                                Step(*a, now)});
  }
  return out;
}

AgentFleet::AgentFleet(AgentFleetOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
AgentFleet::~AgentFleet() { impl_->Shutdown(); }
absl::Status AgentFleet::Add(SimulatedAgentParams params) { return impl_->Add(std::move(params)); }
bool AgentFleet::Remove(const std::string& pod) { return impl_->Remove(pod); }
void AgentFleet::Shutdown() { impl_->Shutdown(); }
FleetCounts AgentFleet::Counts() const { return impl_->Counts(); }
std::vector<AgentSnapshot> AgentFleet::Snapshot() const { return impl_->Snapshot(); }

}  // namespace peregrine::loadtest
