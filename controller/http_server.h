// HttpServer: the controller's HTTP endpoint: /healthz, /metrics (Prometheus text format)
// and the JSON API peregrinectl uses:
//   GET  /api/v1/jobs                         -> [{namespace, name, phase, ...}]
//   GET  /api/v1/jobs/{namespace}/{name}      -> {status, timeline} (status_json.h kFull)
//   GET  /api/v1/jobs/{namespace}/{name}/machines -> {summary, machines, standby}: every slot
//   POST /api/v1/jobs/{namespace}/{name}/faults (local mode) -> {result}
//   POST /api/v1/jobs/{namespace}/{name}/code  (code_update.h body) -> {message, ...}
// Errors are JSON {"error": "..."} with 400 (bad request, naming the field), 404, 409,
// 503 (kube mode: not the leader, API server unavailable), 500.
//
// With an ApiAuthorizer (kube mode, api_auth.h) every /api/v1 request needs
// "Authorization: Bearer <token>": 401 with WWW-Authenticate: Bearer without one or with
// a token the authorizer refuses, 403 naming the refused access, 503 when the review
// could not be made; the job list holds only the namespaces the caller may list. Without
// one (local mode) the API serves anyone who reaches its address, as the local
// controller's loopback listener always did. /healthz and /metrics never need a token.
// The endpoints served are chosen per server (HttpEndpoints), so the metrics and the API
// can listen on separate ports.
//
// The jobs come from a JobDirectory, which the driver implements: local mode serves its
// one JobController; kube mode the controllers of the jobs it reconciles right now, and
// applies code updates to the TrainingJob object in the API server.
//
// Limits (HttpLimits, cpp-httplib's own settings): a request body above max_body_bytes
// is answered 413 with a JSON error, whether it declares its Content-Length or is sent
// chunked (its bytes are never kept); at most max_connections connections are served at
// once, one worker thread each; accepted connections beyond that wait in a queue of at
// most max_queued_connections, and past that the server stops accepting (the kernel's
// listen queue holds or refuses the rest). While more connections wait than are served,
// the newest is served first, so a fresh request (a /healthz probe) is answered within
// about one read timeout even while a flood of stalled clients waits. A client that sends
// nothing for idle_timeout, or stalls mid-request for read_timeout, is dropped.
//
// Thread-safe; Start() serves on a thread pool until Stop(). The directory (or the
// controllers), metrics and fault sink (nullptr: fault injection answers 409) must
// outlive the server.
#ifndef PEREGRINE_CONTROLLER_HTTP_SERVER_H_
#define PEREGRINE_CONTROLLER_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/api_auth.h"
#include "controller/code_update.h"
#include "controller/controller_metrics.h"
#include "controller/job_controller.h"
#include "proto/api/fault_request.h"

namespace httplib {
class Server;
struct Response;
}

namespace peregrine {

struct ConnectionQueueState;

// Where POST .../faults goes: the local mode's fault injector. Inject applies the request
// to the job whose current status is `status` and returns what was done, or an error
// naming the field (kInvalidArgument) or the missing target (kNotFound).
class FaultSink {
 public:
  virtual ~FaultSink() = default;
  virtual absl::StatusOr<std::string> Inject(const FaultRequest& request, const JobStatus& status) = 0;
};

// The jobs a controller process runs, for its HTTP API.
class JobDirectory {
 public:
  virtual ~JobDirectory() = default;
  // Calls fn for every job; a job is not destroyed while fn runs on it.
  virtual void ForEachJob(const std::function<void(JobController&)>& fn) = 0;
  // Calls fn on the job namespace/name and returns true, or returns false when there is
  // none. The job is not destroyed while fn runs.
  virtual bool WithJob(const std::string& ns, const std::string& name,
                       const std::function<void(JobController&)>& fn) = 0;
  // Applies a code update. On success a one-line message for the user. Errors:
  // kNotFound (no such job), kInvalidArgument (the update makes the job invalid: the
  // job parser's message), kUnavailable (try again), others as they come.
  virtual absl::StatusOr<std::string> UpdateCode(const std::string& ns, const std::string& name,
                                                 const CodeUpdateRequest& request) = 0;
};

// A fixed list of JobControllers (local mode): a code update goes straight to
// JobController::UpdateJob.
class StaticJobDirectory final : public JobDirectory {
 public:
  explicit StaticJobDirectory(std::vector<JobController*> jobs) : jobs_(std::move(jobs)) {}
  void ForEachJob(const std::function<void(JobController&)>& fn) override;
  bool WithJob(const std::string& ns, const std::string& name, const std::function<void(JobController&)>& fn) override;
  absl::StatusOr<std::string> UpdateCode(const std::string& ns, const std::string& name,
                                         const CodeUpdateRequest& request) override;

 private:
  const std::vector<JobController*> jobs_;
};

// The server's resource limits (see the file comment). Every field must be positive.
struct HttpLimits {
  size_t max_body_bytes = 1 << 20;       // request body (413 above)
  int max_connections = 32;              // served at once (worker threads)
  int max_queued_connections = 1024;     // accepted, waiting for a worker
  int read_timeout_seconds = 5;          // a stalled request is dropped
  int write_timeout_seconds = 5;         // a client that stops reading is dropped
  int idle_timeout_seconds = 5;          // keep-alive: an idle connection is closed
  int max_requests_per_connection = 100; // keep-alive: then the connection is closed
};

// InvalidArgument naming the field when a limit is not positive.
absl::Status ValidateHttpLimits(const HttpLimits& limits);

// Which endpoints a server answers.
enum class HttpEndpoints {
  kAll,          // /healthz, /metrics and /api/v1 (local mode)
  kApiOnly,      // /api/v1 and /healthz
  kMetricsOnly,  // /healthz and /metrics
};

class HttpServer {
 public:
  // Serves a fixed list of jobs (StaticJobDirectory).
  HttpServer(std::vector<JobController*> jobs, ControllerMetrics* metrics, FaultSink* faults);
  // Serves the jobs of `directory`, which must outlive the server.
  HttpServer(JobDirectory* directory, ControllerMetrics* metrics, FaultSink* faults);
  ~HttpServer();

  // Before Start(): every /api/v1 request is authenticated and authorised by
  // `authorizer` (must outlive the server); nullptr (the default) checks nothing.
  void RequireAuth(ApiAuthorizer* authorizer) { authorizer_ = authorizer; }
  // Before Start(): the endpoints served (default kAll).
  void ServeOnly(HttpEndpoints endpoints) { endpoints_ = endpoints; }
  // Before Start(): the limits (default HttpLimits{}); Start() refuses invalid ones.
  void SetLimits(const HttpLimits& limits) { limits_ = limits; }

  // Binds host:port (port 0 picks one) and starts serving; returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  std::unique_ptr<JobDirectory> owned_directory_;
  JobDirectory* directory_;
  ControllerMetrics* metrics_;
  FaultSink* faults_;
  ApiAuthorizer* authorizer_ = nullptr;
  HttpEndpoints endpoints_ = HttpEndpoints::kAll;
  HttpLimits limits_;
  std::shared_ptr<ConnectionQueueState> queue_;  // shared with the server's task queue
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;

  // The caller, when it may do `access` (nullopt after answering 401/403/503 on `res`).
  std::optional<ApiUser> Admit(const std::string& authorization, const ResourceAccess& access,
                               httplib::Response& res);
  // The caller, when its token is valid (nullopt after answering on `res`).
  std::optional<ApiUser> Authenticate(const std::string& authorization, httplib::Response& res);
  void RegisterApi();
  void ApplyLimits();
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_HTTP_SERVER_H_
