#include "agent/outbox.h"

#include <utility>

// Heartbeats carry the agent's whole current state (training, progress window, checkpoint
// report), so a newer one makes an older one redundant: under pressure the oldest goes
// first and the newest survives as long as anything droppable can go instead. Everything
// else is a fact the controller would not learn again (a registration, a process exit, a
// command's result, a checkpoint event) and stays, whatever the limits say; the stream's
// end (keepalive, at most minutes into a partition) bounds how long such messages pile up.
// The drop scans from the front: the queue is short (its limits) and drops are rare.

namespace peregrine {

bool OutboxDroppable(const peregrine::v1::AgentMessage& message) { return message.has_heartbeat(); }

ControllerOutbox::ControllerOutbox(OutboxLimits limits) : limits_(limits) {}

bool ControllerOutbox::OverLimits() const {
  return queue_.size() > limits_.max_messages || bytes_ > limits_.max_bytes;
}

size_t ControllerOutbox::Push(peregrine::v1::AgentMessage message) {
  Entry entry;
  entry.bytes = message.ByteSizeLong();
  entry.droppable = OutboxDroppable(message);
  entry.message = std::move(message);
  bytes_ += entry.bytes;
  if (entry.droppable) ++droppable_;
  queue_.push_back(std::move(entry));
  size_t dropped = 0;
  for (auto it = queue_.begin(); OverLimits() && droppable_ > 0 && it != queue_.end();) {
    if (!it->droppable) {
      ++it;
      continue;
    }
    bytes_ -= it->bytes;
    --droppable_;
    ++dropped;
    it = queue_.erase(it);
  }
  dropped_ += dropped;
  return dropped;
}

std::optional<peregrine::v1::AgentMessage> ControllerOutbox::Pop() {
  if (queue_.empty()) return std::nullopt;
  Entry entry = std::move(queue_.front());
  queue_.pop_front();
  bytes_ -= entry.bytes;
  if (entry.droppable) --droppable_;
  return std::move(entry.message);
}

std::vector<peregrine::v1::AgentMessage> ControllerOutbox::TakeAll() {
  std::vector<peregrine::v1::AgentMessage> all;
  all.reserve(queue_.size());
  for (Entry& entry : queue_) all.push_back(std::move(entry.message));
  queue_.clear();
  bytes_ = 0;
  droppable_ = 0;
  return all;
}

}  // namespace peregrine
