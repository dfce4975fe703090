#include "controller/kube/events.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::kube {
namespace {

using nlohmann::json;

constexpr size_t kMaxMessageBytes = 1024;

std::string Truncate(absl::string_view message) {
  if (message.size() <= kMaxMessageBytes) return std::string(message);
  size_t end = kMaxMessageBytes;
  // Do not cut a UTF-8 sequence in half.
  while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;
  return std::string(message.substr(0, end));
}

std::string Timestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace

EventRecorder::EventRecorder(RestClient* client, EventRecorderOptions options, Clock* clock)
    : client_(client), options_(std::move(options)), clock_(clock) {}

int EventRecorder::TrackedForTest() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(tracked_.size());
}

absl::Status EventRecorder::Record(const ObjectReference& object, EventType type,
                                   absl::string_view reason, absl::string_view message) {
  if (object.name.empty()) return absl::InvalidArgumentError("event: the object has no name");
  if (reason.empty()) return absl::InvalidArgumentError("event: the reason is empty");
  const std::string type_name = type == EventType::kWarning ? "Warning" : "Normal";
  const std::string text = Truncate(message);
  const std::string ns =
      object.namespace_name.empty() ? options_.default_namespace : object.namespace_name;
  const std::string key = absl::StrCat(object.kind, "\x1f", ns, "\x1f", object.name, "\x1f",
                                       object.uid, "\x1f", type_name, "\x1f", reason, "\x1f", text);
  const ResourcePath events{.group = "", .version = "v1", .plural = "events", .namespace_name = ns};
  const absl::Time now = clock_->Now();

  // A repeat within the window: bump the existing Event.
  std::string existing_name;
  int next_count = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = tracked_.find(key);
    if (it != tracked_.end() && now - it->second.last_seen < options_.aggregation_window) {
      existing_name = it->second.event_name;
      next_count = it->second.count + 1;
    }
  }
  if (!existing_name.empty()) {
    absl::StatusOr<json> patched = client_->MergePatch(
        events, existing_name, json{{"count", next_count}, {"lastTimestamp", Timestamp(now)}});
    if (patched.ok()) {
      absl::MutexLock lock(&mu_);
      auto it = tracked_.find(key);
      if (it != tracked_.end()) {
        it->second.count = std::max(it->second.count, next_count);
        it->second.last_seen = now;
        lru_.splice(lru_.begin(), lru_, it->second.lru_position);
      }
      return absl::OkStatus();
    }
    // The Event expired on the server (events have a TTL): create a new one.
    if (!absl::IsNotFound(patched.status())) return patched.status();
  }

  // Names are <object>.<hex nanoseconds> as client-go makes them; the nanoseconds are
  // kept strictly increasing so two events in the same instant do not collide.
  uint64_t stamp = static_cast<uint64_t>(absl::ToUnixNanos(now));
  {
    absl::MutexLock lock(&mu_);
    stamp = std::max(stamp, last_name_stamp_ + 1);
    last_name_stamp_ = stamp;
  }
  const std::string name = absl::StrFormat("%s.%x", object.name, stamp);
  json involved = {{"kind", object.kind}, {"name", object.name}, {"namespace", object.namespace_name}};
  if (!object.api_version.empty()) involved["apiVersion"] = object.api_version;
  if (!object.uid.empty()) involved["uid"] = object.uid;
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", ns}}},
                {"involvedObject", involved},
                {"reason", std::string(reason)},
                {"message", text},
                {"type", type_name},
                {"count", 1},
                {"firstTimestamp", Timestamp(now)},
                {"lastTimestamp", Timestamp(now)},
                {"source", {{"component", options_.component}}},
                {"reportingComponent", options_.component},
                {"reportingInstance", options_.instance}};
  if (!options_.instance.empty()) event["source"]["host"] = options_.instance;
  absl::StatusOr<json> created = client_->Create(events, event);
  if (!created.ok()) return created.status();

  absl::MutexLock lock(&mu_);
  auto it = tracked_.find(key);
  if (it != tracked_.end()) {
    lru_.erase(it->second.lru_position);
    tracked_.erase(it);
  }
  lru_.push_front(key);
  tracked_[key] = Tracked{name, ns, 1, now, lru_.begin()};
  while (static_cast<int>(tracked_.size()) > std::max(1, options_.max_tracked)) {
    tracked_.erase(lru_.back());
    lru_.pop_back();
  }
  return absl::OkStatus();
}

}  // namespace peregrine::kube
