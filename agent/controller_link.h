// ControllerLink: the agent's one long-lived AgentService.Connect stream,
// reconnected for ever with jittered backoff until Stop(). Callbacks report each
// stream's opening, messages and end with its session number; Send(session, msg)
// queues the message for that session only and returns false when it is gone (the caller
// keeps what must not be lost and re-sends it after the next registration).
// Writes never block the caller: Send() puts the message in the stream's bounded outbox
// (ControllerOutbox: over its limits the oldest heartbeats are dropped and counted, nothing
// else is) and returns at once; one writer thread per stream writes the outbox in order
// and ends, joined, with the stream. Events still queued when a stream ends are queued
// again, first, when the next stream registers (MarkRegistered); other queued messages
// end with their stream (the next registration carries the state and executed command
// ids, as it always has).
// Identity: every stream carries "authorization: Bearer <token>": first
// `options.credential` (the pod's credential, or its bootstrap token in Kubernetes), then
// the credential of the newest RegisterAck that carried one (agent_credential), kept in
// memory only and used for every later stream, including after a controller restart.
// Thread safety: every public method is thread-safe; callbacks run on the link's
// thread, one at a time, never after Stop() returned, and must not call Stop().
// Ownership: the owner outlives the link and calls Stop() (or destroys it) first.
#ifndef PEREGRINE_AGENT_CONTROLLER_LINK_H_
#define PEREGRINE_AGENT_CONTROLLER_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/outbox.h"
#include "base/clock.h"
#include "peregrine/v1/agent.grpc.pb.h"

namespace peregrine {

// Pure: delay n (0-based, n failed attempts so far) is
//   min(initial * 2^n, max) * (0.5 + 0.5 * u),  u uniform in [0, 1).
class ReconnectBackoff {
 public:
  ReconnectBackoff(absl::Duration initial, absl::Duration max);
  absl::Duration Next(double uniform01);
  void Reset();

 private:
  absl::Duration initial_;
  absl::Duration max_;
  absl::Duration base_;
};

// Reads the file holding the agent's first bearer token (a credential or a bootstrap
// token: the text, surrounding whitespace stripped) and removes it, so no process started
// later finds it. kFailedPrecondition naming the file when it cannot be read, is empty or
// cannot be removed.
absl::StatusOr<std::string> TakeCredentialFile(const std::string& path);

struct ControllerLinkOptions {
  std::string target;       // host:port
  std::string credential;   // the first streams' bearer token; empty: none until an ack gives one
  std::string tls_ca_file;  // empty: insecure channel
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  absl::Duration keepalive = absl::Minutes(5);
  uint64_t seed = 0;        // jitter seed
  Clock* clock = RealClock();  // the backoff waits' time (must outlive the link)
  OutboxLimits outbox;         // each stream's queue of messages not yet written
};

class ControllerLink {
 public:
  static constexpr size_t kMaxCarriedEvents = 1024;
  struct Callbacks {
    std::function<void(uint64_t session)> on_stream_open;
    std::function<void(uint64_t session, peregrine::v1::ControllerMessage message)> on_message;
    std::function<void(uint64_t session, absl::Status status)> on_stream_closed;
  };

  ControllerLink(ControllerLinkOptions options, Callbacks callbacks);
  ~ControllerLink();
  ControllerLink(const ControllerLink&) = delete;
  ControllerLink& operator=(const ControllerLink&) = delete;

  void Start();
  // Cancels the stream, stops reconnecting, joins the thread. Idempotent.
  void Stop();

  // Queues `message` for `session` and returns true at once, whatever the network does;
  // false (nothing queued) when `session` is not the live stream (ended, or its write failed).
  bool Send(uint64_t session, const peregrine::v1::AgentMessage& message);
  // The stream `session` registered: resets the backoff and queues the events an earlier
  // stream ended with before anything sent later.
  void MarkRegistered(uint64_t session);
  // Messages dropped since construction: heartbeats over the outbox's limits, and events
  // carried to the next stream beyond kMaxCarriedEvents (oldest first).
  uint64_t dropped_messages() const;

 private:
  using Stream = grpc::ClientReaderWriter<peregrine::v1::AgentMessage, peregrine::v1::ControllerMessage>;
  void Run();
  // The stream's writer thread: writes the outbox until EndWriter(); a failed write cancels
  // the stream (`context`).
  void WriteLoop(Stream* stream, grpc::ClientContext* context);
  bool WriterHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Stops and joins the stream's writer (cancelling `context` when a write is in progress)
  // and keeps the events it left.
  void EndWriter(std::thread& writer, grpc::ClientContext* context, uint64_t session);

  const ControllerLinkOptions options_;
  const Callbacks callbacks_;
  std::thread thread_;

  absl::Mutex state_mu_;
  absl::CondVar stop_cv_;  // signalled (with state_mu_) when stopping_ is set
  bool stopping_ ABSL_GUARDED_BY(state_mu_) = false;
  bool registered_ ABSL_GUARDED_BY(state_mu_) = false;
  uint64_t session_ ABSL_GUARDED_BY(state_mu_) = 0;
  std::string bearer_ ABSL_GUARDED_BY(state_mu_);  // the next stream's bearer token
  grpc::ClientContext* context_ ABSL_GUARDED_BY(state_mu_) = nullptr;

  mutable absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(state_mu_);
  uint64_t write_session_ ABSL_GUARDED_BY(write_mu_) = 0;  // 0: no stream takes messages
  bool writer_stop_ ABSL_GUARDED_BY(write_mu_) = false;
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;  // the writer is inside Stream::Write
  ControllerOutbox outbox_ ABSL_GUARDED_BY(write_mu_);
  uint64_t stream_dropped_ ABSL_GUARDED_BY(write_mu_) = 0;  // outbox_.dropped() when the stream opened
  std::deque<peregrine::v1::AgentMessage> carried_ ABSL_GUARDED_BY(write_mu_);  // events for the next stream
  uint64_t carried_dropped_ ABSL_GUARDED_BY(write_mu_) = 0;  // carried events over the bound
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_CONTROLLER_LINK_H_
