// DataToken: the job's checkpoint data-channel token as this agent knows it now. The
// controller hands it out in every RegisterAck (RegisterAck.data_token, derived from its
// agent key, the same for every agent of the job); the agent's control loop Sets it, and
// the data channel reads it on every call: the CheckpointPeer server (PeerServer) accepts
// only calls carrying it, the backup sender and the restore fetch send it. Until the first
// Set with a non-empty token there is none, and the server refuses every call.
//
// Thread-safe. Ownership: AgentCheckpoints owns it; the server and the sender keep a
// pointer and must not outlive it.
#ifndef PEREGRINE_AGENT_CHECKPOINT_DATA_TOKEN_H_
#define PEREGRINE_AGENT_CHECKPOINT_DATA_TOKEN_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace peregrine::checkpoint {

class DataToken {
 public:
  DataToken() = default;
  explicit DataToken(std::string token) : token_(std::move(token)) {}
  DataToken(const DataToken&) = delete;
  DataToken& operator=(const DataToken&) = delete;

  // Replaces the token (an empty one leaves the channel refusing every call again).
  void Set(std::string token);
  // The token now; empty when there is none.
  std::string Get() const;
  // OK when there is a token and `presented` is it (constant-time comparison);
  // kUnauthenticated otherwise, saying which (never the token).
  absl::Status Check(absl::string_view presented) const;

 private:
  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_DATA_TOKEN_H_
