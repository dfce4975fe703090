// FakeKubeApiServer: an in-process Kubernetes API server for the controller's tests.
//
// What it is for: tests drive the controller's real Kubernetes client against a real
// HTTP server on 127.0.0.1 (port bound to 0), without a cluster. It follows the
// Kubernetes API's documented semantics for the parts the controller uses, and
// nothing more:
//   - one global resourceVersion counter (like etcd's revision) bumped by every write;
//     metadata.uid, creationTimestamp, generation (1 on create) set by the server;
//   - get, list (labelSelector, fieldSelector, resourceVersion + resourceVersionMatch,
//     limit + continue with consistent snapshots) and watch (?watch=true): chunked
//     newline-delimited WatchEvents, synthetic ADDED events when started without a
//     resourceVersion, BOOKMARK events when allowWatchBookmarks=true, sendInitialEvents,
//     timeoutSeconds, and an ERROR event carrying a 410 "Expired" Status when the
//     requested resourceVersion is older than the kept history;
//   - create (409 AlreadyExists, generateName), update (409 Conflict on a stale
//     metadata.resourceVersion), JSON merge patch (RFC 7386) and JSON patch (RFC 6902);
//   - the status subresource: writes to the main resource ignore status, writes to
//     .../status change only status; generation moves only when the spec changes;
//   - delete with DeleteOptions preconditions, finalizers + deletionTimestamp, and
//     garbage collection of dependents through ownerReferences (Background, Foreground
//     with blockOwnerDeletion, Orphan);
//   - errors as metav1.Status objects with the real server's code, reason and message.
// Served by default: core/v1 pods, services, events, nodes (cluster-scoped);
// coordination.k8s.io/v1 leases; events.k8s.io/v1 events; peregrine.dev/v1alpha1
// trainingjobs. RegisterResource() adds any other group/version/plural.
//   - TokenReview and SubjectAccessReview (create only) with the tokens and rules a test
//     gives auth() (fake_kube_auth.h).
// Not modelled: authentication and authorisation of the requests themselves (the
// Authorization header is only recorded), admission, defaulting and schema validation, strategic merge patch and server-side
// apply (415), pod graceful termination (a pod without finalizers is deleted at once),
// namespaces as objects (every namespace exists), clusterIP allocation.
//
// Thread safety: every public method may be called from any thread; the HTTP server
// runs its own worker pool. Stop() (also run by the destructor) ends every open watch
// promptly and joins all server threads.
#ifndef PEREGRINE_TESTS_FAKES_FAKE_KUBE_API_SERVER_H_
#define PEREGRINE_TESTS_FAKES_FAKE_KUBE_API_SERVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/fakes/fake_kube_auth.h"

namespace peregrine::testing {

// One served resource type, e.g. {"", "v1", "pods", "Pod"}.
struct KubeResourceType {
  std::string group;    // "" for the core group
  std::string version;  // "v1"
  std::string plural;   // "pods": the URL path segment
  std::string kind;     // "Pod"
  bool namespaced = true;
  bool status_subresource = false;
  // Custom-resource behaviour (apiextensions): list items carry kind/apiVersion and an
  // update must name metadata.resourceVersion. Built-in types allow unconditional PUT.
  bool custom_resource = false;
  // For types with a status subresource, what a create stores as .status: the status
  // sent (nodes, which the kubelet registers with their status), else
  // `status_on_create` (pods: phase Pending), where null drops it (custom resources).
  bool keep_status_on_create = false;
  nlohmann::json status_on_create;
  // Fields a fieldSelector may name besides metadata.name and metadata.namespace.
  std::vector<std::string> selectable_fields;

  // "pods" for the core group, "trainingjobs.peregrine.dev" otherwise: the name used
  // in error messages and in the ForTest hooks below.
  std::string QualifiedName() const;
};

struct FakeKubeApiServerOptions {
  // How often a watch opened with allowWatchBookmarks=true gets a BOOKMARK
  // (the real server sends about one a minute).
  absl::Duration bookmark_interval = absl::Minutes(1);
  // Watch duration when the request gives no timeoutSeconds.
  absl::Duration default_watch_timeout = absl::Minutes(30);
  // Write events kept for watch resumption and exact-version lists; older ones are
  // compacted away (a request for a version before them gets 410 Gone).
  size_t history_limit = 10000;
  // Seeds generateName suffixes and uids, so runs are reproducible.
  uint64_t seed = 1;
  // HTTP worker threads: each open watch holds one.
  int worker_threads = 32;
};

class FakeKubeApiServer {
 public:
  explicit FakeKubeApiServer(FakeKubeApiServerOptions options = {});
  ~FakeKubeApiServer();  // Stop()s.
  FakeKubeApiServer(const FakeKubeApiServer&) = delete;
  FakeKubeApiServer& operator=(const FakeKubeApiServer&) = delete;

  // Binds 127.0.0.1 on a free port and starts serving. Fails if binding fails or
  // the server was already started.
  absl::Status Start();
  // Ends every watch, stops serving and joins the server threads. Idempotent.
  void Stop();
  int port() const;
  std::string base_url() const;  // "http://127.0.0.1:<port>"

  // Serves another resource type (replacing one with the same group and plural).
  void RegisterResource(KubeResourceType type);

  // The tokens and access rules TokenReview and SubjectAccessReview answer from.
  FakeKubeAuth& auth();

  // ---- Test hooks ----
  // Current value of the global resourceVersion counter.
  int64_t ResourceVersionForTest() const;
  // Drops all kept history: any list/watch at an older resourceVersion gets 410.
  void CompactForTest();
  // Aborts every open watch connection (the client sees the stream break).
  void DropWatchesForTest();
  // Makes every open watch with allowWatchBookmarks=true send a BOOKMARK now.
  void EmitBookmarksForTest();
  // Number of watch streams currently open.
  int OpenWatchCountForTest() const;
  // The next `count` requests with this verb (get, list, watch, create, update, patch,
  // delete, deletecollection; "*" for any) on this resource ("pods", "pods/status",
  // "trainingjobs.peregrine.dev"; "*" for any) fail with `http_code` and a Status.
  void FailNextRequestsForTest(std::string verb, std::string resource, int count, int http_code);
  // Before each of the next `count` requests with this verb on this resource that name
  // an existing object, another client writes that object first (an annotation
  // test.peregrine.dev/interleaved=<n>, one MODIFIED event): a read-modify-write whose
  // read came before meets a real 409 Conflict on its stale resourceVersion.
  void InterleaveWriteForTest(std::string verb, std::string resource, int count);
  // The object names of every delete request received on this resource, in order
  // (also ones that failed or found nothing).
  std::vector<std::string> DeleteRequestsForTest(absl::string_view resource) const;
  // Requests received so far with this verb on this resource ("*" matches any).
  int RequestCountForTest(absl::string_view verb, absl::string_view resource) const;
  // Calls `hook` after each write request (create, update, patch, delete,
  // deletecollection; also ones it refused, not those failed by FailNextRequestsForTest)
  // was handled and before its response is sent, with the verb, the resource ("pods",
  // "nodes", "trainingjobs.peregrine.dev/status"), the object's name ("" for a collection)
  // and the request's User-Agent (which client wrote: the controller's
  // "peregrine-controller/<identity>", or a test's own client). It runs with the server's
  // lock held and must not call the server; a test kills the writing client there, so
  // the write happened but its response is never read. An empty hook removes it.
  using WriteHook = std::function<void(const std::string& verb, const std::string& resource, const std::string& name,
                                       const std::string& user_agent)>;
  void SetWriteHookForTest(WriteHook hook);
  // Like the write hook, with what the server answered: after each write request (also
  // ones it refused) and before its response is sent, `observer` gets the verb, the
  // resource, the name, the User-Agent, the HTTP code and the response body (for a
  // successful create, update or patch: the object as stored). Runs with the server's
  // lock held and must not call the server. An empty observer removes it.
  struct WriteRecord {
    std::string verb, resource, name, user_agent;
    int code = 0;
    const nlohmann::json* response = nullptr;  // valid during the call only
  };
  using WriteObserver = std::function<void(const WriteRecord& write)>;
  void SetWriteObserverForTest(WriteObserver observer);
  // Every request received so far, counted by (verb, resource) as RequestCountForTest
  // names them.
  std::map<std::pair<std::string, std::string>, int> RequestCountsForTest() const;
  // The Authorization header of the last request ("" when it had none).
  std::string LastAuthorizationForTest() const;
  // Reads an object as stored ("" namespace for cluster-scoped). NotFound if absent.
  absl::StatusOr<nlohmann::json> GetForTest(absl::string_view resource, absl::string_view ns,
                                            absl::string_view name) const;
  // Creates an object as a POST would. Errors carry the Status message.
  absl::StatusOr<nlohmann::json> CreateForTest(absl::string_view resource, absl::string_view ns,
                                               nlohmann::json object);
  // Changes an object's status as another component would (the kubelet, a node
  // controller): `mutate` edits .status in place; one MODIFIED event, generation kept.
  absl::Status MutateStatusForTest(absl::string_view resource, absl::string_view ns,
                                   absl::string_view name,
                                   const std::function<void(nlohmann::json& status)>& mutate);
  // Changes a whole object as another component would (the scheduler binding a pod and
  // its kubelet reporting it running, in one write): `mutate` edits the object in place;
  // the server's metadata (uid, resourceVersion, generation) is kept. One MODIFIED event.
  absl::Status MutateObjectForTest(absl::string_view resource, absl::string_view ns,
                                   absl::string_view name,
                                   const std::function<void(nlohmann::json& object)>& mutate);
  // Sets pod status.phase (e.g. "Failed", "Running").
  absl::Status SetPodPhaseForTest(absl::string_view ns, absl::string_view name,
                                  absl::string_view phase);
  // Sets the node's Ready condition to "True" or "False".
  absl::Status SetNodeReadyForTest(absl::string_view name, bool ready);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_FAKES_FAKE_KUBE_API_SERVER_H_
