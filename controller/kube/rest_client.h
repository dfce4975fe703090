// A small untyped Kubernetes REST client: objects are nlohmann::json, resources are
// addressed by (group, version, plural, namespace, name, subresource).
//
// Contract:
//   - Success returns the object (or list) the API server returned.
//   - HTTP errors become absl::Status with one code per kind of next step:
//       404 -> kNotFound; 409 with reason AlreadyExists -> kAlreadyExists;
//       409 otherwise (resourceVersion conflict, failed precondition) -> kAborted
//       (re-read and try again); 410 Gone / "Expired" -> kOutOfRange (re-list);
//       400 / 422 -> kInvalidArgument; 401 -> kUnauthenticated; 403 -> kPermissionDenied;
//       429 and 5xx -> kUnavailable; a transport failure or timeout -> kUnavailable.
//     The status message names the verb, the path and the server's message; the payload
//     carries the Kubernetes reason and HTTP code (see KubeReason, HttpCode, RetryAfter).
//   - 429 and 503 with a Retry-After header are retried after that delay (capped), up to
//     RestClientOptions::max_retry_after_attempts times, for every verb: the server did
//     not act on such a request.
//   - Every request is reported to the optional RequestObserver (verb, resource,
//     HTTP code or 0 for a transport failure, latency).
//
// Thread safety: RestClient is thread-safe; requests run concurrently on separate
// connections (idle keep-alive connections are pooled). A CancelToken may be cancelled
// from any thread. The observer, clock and RestClient must outlive the calls using them.
#ifndef PEREGRINE_CONTROLLER_KUBE_REST_CLIENT_H_
#define PEREGRINE_CONTROLLER_KUBE_REST_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/kube/config.h"

namespace peregrine::kube {

// A collection of resources: /api/v1/namespaces/ns/pods or /apis/group/v1/plural.
struct ResourcePath {
  std::string group;           // "" for the core group
  std::string version = "v1";
  std::string plural;          // "pods", "leases", "trainingjobs"
  std::string namespace_name;  // "" for cluster-scoped resources or all namespaces

  std::string CollectionPath() const;
  // `name` and `subresource` are URL-path-escaped.
  std::string ObjectPath(absl::string_view name, absl::string_view subresource = "") const;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent (a consistent read)
  int page_size = 500;           // List() follows continue tokens until the end
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  bool allow_watch_bookmarks = true;
  absl::Duration timeout = absl::Minutes(5);  // server-side timeoutSeconds
};

// One watch event: type is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
struct WatchEvent {
  std::string type;
  nlohmann::json object;
};
// Returning a non-OK status ends the watch; Watch() then returns that status.
using WatchHandler = std::function<absl::Status(WatchEvent&)>;

struct DeleteOptions {
  std::string precondition_uid;               // "" = no precondition
  std::string precondition_resource_version;  // "" = no precondition
  std::string propagation_policy;             // "", "Foreground", "Background", "Orphan"
  // Seconds the object's owner gets to stop (pods: SIGTERM -> SIGKILL); unset = its default.
  std::optional<int64_t> grace_period_seconds;
};

// Metrics hook. Implementations must be thread-safe and must not call the client.
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // `http_code` is 0 when no HTTP response arrived (connect/read failure, cancel).
  virtual void OnRequestDone(absl::string_view verb, absl::string_view resource, int http_code,
                             absl::Duration latency) = 0;
};

// Lets another thread abort a long request (a watch). Cancel() is sticky.
class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;
  void Cancel();
  bool IsCancelled() const;
  // Re-arms the token for the next request (only between requests).
  void Reset();

  // Internal to RestClient: the function that aborts the in-flight request.
  // Returns false (and installs nothing) when the token is already cancelled.
  bool InstallAbortForRequest(std::function<void()> abort);
  void ClearAbortForRequest();

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> abort_ ABSL_GUARDED_BY(mu_);
};

struct RestClientOptions {
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(30);  // per read/write of one request
  int max_retry_after_attempts = 3;
  absl::Duration max_retry_after = absl::Seconds(30);
  absl::Duration token_file_refresh = absl::Minutes(1);
  std::string user_agent = "peregrine-controller";
  int max_idle_connections = 4;
  Clock* clock = nullptr;                // null = RealClock()
  RequestObserver* observer = nullptr;   // optional
};

class RestClient {
 public:
  // Fails when the server URL is malformed or TLS material cannot be staged.
  static absl::StatusOr<std::unique_ptr<RestClient>> Create(const Config& config,
                                                            RestClientOptions options = {});
  ~RestClient();
  RestClient(const RestClient&) = delete;
  RestClient& operator=(const RestClient&) = delete;

  absl::StatusOr<nlohmann::json> Get(const ResourcePath& path, absl::string_view name,
                                     absl::string_view subresource = "");
  // The whole list (all pages): {"items": [...], "metadata": {"resourceVersion": ...}}.
  absl::StatusOr<nlohmann::json> List(const ResourcePath& path, const ListOptions& options);
  // Streams events to `handler` until the server ends the watch (returns OK), the
  // handler fails (returns its status), `cancel` is cancelled (kCancelled), the
  // resourceVersion is too old (kOutOfRange, from an HTTP 410 or an ERROR event with
  // code 410) or the connection fails (kUnavailable). `cancel` may be null.
  absl::Status Watch(const ResourcePath& path, const WatchOptions& options,
                     const WatchHandler& handler, CancelToken* cancel);
  absl::StatusOr<nlohmann::json> Create(const ResourcePath& path, const nlohmann::json& object);
  // PUT; a metadata.resourceVersion in `object` makes it conditional (kAborted on conflict).
  absl::StatusOr<nlohmann::json> Update(const ResourcePath& path, absl::string_view name,
                                        const nlohmann::json& object);
  // PUT to the status subresource; same concurrency rule as Update.
  absl::StatusOr<nlohmann::json> UpdateStatus(const ResourcePath& path, absl::string_view name,
                                              const nlohmann::json& object);
  // JSON merge patch (RFC 7386), optionally on a subresource.
  absl::StatusOr<nlohmann::json> MergePatch(const ResourcePath& path, absl::string_view name,
                                            const nlohmann::json& patch,
                                            absl::string_view subresource = "");
  // kAborted when a precondition does not hold, kNotFound when already gone.
  absl::Status Delete(const ResourcePath& path, absl::string_view name,
                      const DeleteOptions& options = {});

  const std::string& server() const;

 private:
  class Impl;
  explicit RestClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Reads the object, lets `mutate` change it (returning non-OK aborts with that status),
// writes it back conditioned on the resourceVersion it read (to the status subresource
// when `status_subresource`), and on a conflict (kAborted) reads again and retries, up
// to `max_attempts` times. Returns the written object or the last error.
absl::StatusOr<nlohmann::json> UpdateWithRetryOnConflict(
    RestClient& client, const ResourcePath& path, absl::string_view name, bool status_subresource,
    const std::function<absl::Status(nlohmann::json&)>& mutate, int max_attempts = 5);

// Builds the error status for an HTTP response (see the file comment). Exposed for tests.
absl::Status StatusFromHttp(int http_code, absl::string_view body, absl::string_view request,
                            std::optional<absl::Duration> retry_after = std::nullopt);

// The Kubernetes reason ("NotFound", "Conflict", "AlreadyExists", "Expired", ...) carried
// by a status built here, or "" for other statuses.
std::string KubeReason(const absl::Status& status);
// The HTTP code carried by a status built here, or 0.
int HttpCode(const absl::Status& status);
// The server's Retry-After, when it sent one.
std::optional<absl::Duration> RetryAfter(const absl::Status& status);

inline bool IsConflict(const absl::Status& s) { return s.code() == absl::StatusCode::kAborted; }
inline bool IsExpired(const absl::Status& s) { return s.code() == absl::StatusCode::kOutOfRange; }
// (absl::IsNotFound and absl::IsAlreadyExists cover 404 and 409 AlreadyExists.)

// "namespace/name" (or "name" for cluster-scoped objects) from an object's metadata;
// "" when the object has no name.
std::string ObjectKey(const nlohmann::json& object);

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_REST_CLIENT_H_
