// ControllerOutbox: the bounded queue of AgentMessages waiting for the controller stream's
// writer, so the agent's loop hands a message over and goes on without waiting for the
// network. Push() never refuses: when the queue is over its limits it drops the oldest
// droppable messages (heartbeats, each superseded by the next one) and counts them; the
// other messages (registration, events, command results, checkpoint events) are never
// dropped, and may hold the queue above its limits until the writer takes them.
// Not thread-safe (the owner guards it); owns its messages.
#ifndef PEREGRINE_AGENT_OUTBOX_H_
#define PEREGRINE_AGENT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "peregrine/v1/agent.pb.h"

namespace peregrine {

struct OutboxLimits {
  size_t max_messages = 256;
  size_t max_bytes = size_t{8} << 20;  // the messages' encoded sizes
};

// True for the messages a newer one supersedes (heartbeats): the ones the outbox may drop.
bool OutboxDroppable(const peregrine::v1::AgentMessage& message);

class ControllerOutbox {
 public:
  explicit ControllerOutbox(OutboxLimits limits);

  // Appends `message`, then drops the oldest droppable messages (possibly `message`
  // itself) while the queue is over either limit. Returns how many it dropped.
  size_t Push(peregrine::v1::AgentMessage message);
  // The oldest message, removed; nullopt when empty.
  std::optional<peregrine::v1::AgentMessage> Pop();
  // Every message, oldest first; the outbox is empty afterwards (its drop count stays).
  std::vector<peregrine::v1::AgentMessage> TakeAll();

  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }  // since construction

 private:
  struct Entry {
    peregrine::v1::AgentMessage message;
    size_t bytes = 0;
    bool droppable = false;
  };
  bool OverLimits() const;

  const OutboxLimits limits_;
  std::deque<Entry> queue_;
  size_t bytes_ = 0;
  size_t droppable_ = 0;  // entries in queue_ with droppable set
  uint64_t dropped_ = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_OUTBOX_H_
