// Records core/v1 Events about objects ("kubectl describe" shows them), aggregating
// repeats: the same (object, type, reason, message) recorded again within the
// aggregation window increments the existing Event's count and lastTimestamp (a merge
// patch) instead of creating a new Event, as client-go's event correlator does.
//
// Contract: Record() is synchronous and returns the API error, if any (callers that
// must not block post it to a worker). Messages longer than 1024 bytes are truncated.
// At most `max_tracked` distinct events are remembered for aggregation; the least
// recently used are forgotten first (a forgotten one is simply created anew).
//
// Thread safety: thread-safe. The RestClient and Clock must outlive the recorder.
#ifndef PEREGRINE_CONTROLLER_KUBE_EVENTS_H_
#define PEREGRINE_CONTROLLER_KUBE_EVENTS_H_

#include <cstdint>
#include <list>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {

enum class EventType { kNormal, kWarning };

// The object an Event is about (core/v1 ObjectReference).
struct ObjectReference {
  std::string api_version;  // "peregrine.dev/v1"
  std::string kind;         // "TrainingJob"
  std::string namespace_name;
  std::string name;
  std::string uid;
};

struct EventRecorderOptions {
  std::string component = "peregrine-controller";  // source.component
  std::string instance;                            // source.host / reportingInstance
  absl::Duration aggregation_window = absl::Minutes(10);
  int max_tracked = 4096;
  std::string default_namespace = "default";  // for cluster-scoped objects
};

class EventRecorder {
 public:
  EventRecorder(RestClient* client, EventRecorderOptions options, Clock* clock);

  // Creates or aggregates the Event. Errors are the RestClient's; kInvalidArgument when
  // the object has no name or the reason is empty.
  absl::Status Record(const ObjectReference& object, EventType type, absl::string_view reason,
                      absl::string_view message);

  // Distinct events currently remembered for aggregation.
  int TrackedForTest();

 private:
  struct Tracked {
    std::string event_name;
    std::string event_namespace;
    int count = 0;
    absl::Time last_seen;
    std::list<std::string>::iterator lru_position;
  };

  RestClient* const client_;
  const EventRecorderOptions options_;
  Clock* const clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Tracked> tracked_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  uint64_t last_name_stamp_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_EVENTS_H_
