// An informer for one Kubernetes resource (optionally filtered by label/field selector),
// in one namespace, every namespace, or a list of namespaces: it lists, then watches from
// the list's resourceVersion with bookmarks, keeps a local cache of the objects with
// secondary indexes, and tells handlers which keys changed. With a namespace list each
// namespace has its own list/watch loop (and thread) feeding the one cache, so it needs
// read access in those namespaces only.
//
// Contract (client-go reflector semantics):
//   - List (a consistent read), replace the cache, then Watch from the list's
//     resourceVersion with allowWatchBookmarks=true; every event (and bookmark) advances
//     the resourceVersion the next watch starts from.
//   - A watch that ends normally is reopened at once from the last resourceVersion; a
//     410 Gone / Expired re-lists; other failures wait a jittered exponential backoff
//     (800 ms doubling to 30 s, +0..100% jitter, reset after 2 min without failure) and
//     then re-watch (connection failures) or re-list (anything else).
//   - Handlers get only the key ("namespace/name") of an object that may have changed,
//     appeared or disappeared: level-based, the receiver reads the cache for the current
//     state. Handlers run on the informer's thread, without informer locks held; they
//     must be quick (typically WorkQueue::Add).
//   - HasSynced() is true once the first list of every namespace has been stored.
//
// Thread safety: AddIndex/AddHandler before Start(); everything else is thread-safe.
// Cached objects are immutable snapshots shared with readers (std::shared_ptr<const>),
// so a reader never copies an object or holds a lock while using it. The RestClient,
// Clock and Random must outlive the informer.
#ifndef PEREGRINE_CONTROLLER_KUBE_INFORMER_H_
#define PEREGRINE_CONTROLLER_KUBE_INFORMER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {

struct BackoffPolicy {
  absl::Duration initial = absl::Milliseconds(800);
  absl::Duration max = absl::Seconds(30);
  double factor = 2.0;
  double jitter = 1.0;  // the delay is d * (1 + jitter * U[0,1))
  absl::Duration reset_after = absl::Minutes(2);
};

// client-go's exponential backoff manager: the first delay (and the first after a quiet
// reset_after period) is `initial`, then it grows by `factor` up to `max`. Not
// thread-safe; owned by one loop.
class JitteredBackoff {
 public:
  explicit JitteredBackoff(BackoffPolicy policy) : policy_(policy) {}
  absl::Duration Next(absl::Time now, Random& random);

 private:
  const BackoffPolicy policy_;
  absl::Duration current_ = absl::ZeroDuration();
  absl::Time last_start_ = absl::InfinitePast();
};

struct InformerOptions {
  ResourcePath resource;
  // Non-empty: `resource` is listed and watched in each of these namespaces (its own
  // namespace_name is ignored); empty: `resource` as given.
  std::vector<std::string> namespaces;
  std::string label_selector;
  std::string field_selector;
  // Each watch asks the server to end it after a random time in [min, 2*min).
  absl::Duration min_watch_timeout = absl::Minutes(5);
  BackoffPolicy backoff;
};

// Values an object is indexed under (for example its "peregrine.dev/job" label).
using IndexFunc = std::function<std::vector<std::string>(const nlohmann::json& object)>;
using KeyHandler = std::function<void(const std::string& key)>;
using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// Indexes an object by the value of one label ("" or absent: not indexed).
IndexFunc IndexByLabel(std::string label_key);

class Informer {
 public:
  Informer(RestClient* client, InformerOptions options, Clock* clock, Random* random);
  ~Informer();  // Stop()s
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void AddIndex(const std::string& name, IndexFunc index);
  void AddHandler(KeyHandler handler);

  void Start();
  // Ends the loop (aborting an open watch) and joins its thread. Idempotent.
  void Stop();

  bool HasSynced();  // every namespace's first list stored
  // nullptr when the key is not cached.
  ObjectPtr Get(const std::string& key);
  std::vector<ObjectPtr> List();
  std::vector<std::string> Keys();
  // Objects whose index `index` yields `value`; empty for an unknown index.
  std::vector<ObjectPtr> ByIndex(const std::string& index, const std::string& value);
  // The first namespace's (the only one's, without a namespace list).
  std::string LastSyncResourceVersion();
  // Number of completed lists, all namespaces together (1 per namespace after the first
  // sync; more after 410s or errors).
  int ListCount();
  // The last list/watch failure of the first namespace that has one; OK again once a list
  // succeeds or a watch delivers an event or bookmark.
  absl::Status LastError();

 private:
  struct Index {
    IndexFunc func;
    absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> keys_by_value;
  };
  // One list/watch loop: a namespace of `resource` (or `resource` as given).
  struct Stream {
    ResourcePath resource;
    CancelToken cancel;
    absl::Notification loop_done;
    std::thread thread;
    // Guarded by the informer's mu_.
    bool synced = false;
    int list_count = 0;
    std::string resource_version;
    absl::Status last_error;
  };
  void Run(Stream& stream);
  absl::Status ListAndReplace(Stream& stream);
  absl::Status WatchOnce(Stream& stream, int* events);
  void UpsertLocked(const std::string& key, ObjectPtr object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify(const std::vector<std::string>& keys);
  bool Pause(absl::Duration d);
  bool Stopping();
  void SetError(Stream& stream, absl::Status status);

  RestClient* const client_;
  const InformerOptions options_;
  Clock* const clock_;
  Random* const random_;
  std::vector<KeyHandler> handlers_;  // fixed after Start()
  std::vector<std::unique_ptr<Stream>> streams_;  // fixed at construction, at least one

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, ObjectPtr> items_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Index> indexes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_INFORMER_H_
