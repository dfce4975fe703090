#include "controller/http_server.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

// Timeline entries and messages quote process output, which need not be UTF-8.
std::string Dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void JsonError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(Dump(nlohmann::json{{"error", message}}), "application/json");
}

// Answers `code` with a JSON error and closes the connection after the response: for a
// request whose body was left unread, where the bytes after it are not a next request.
// (cpp-httplib 0.11 closes a connection when a content provider gives up; the response
// has no Content-Length, so the client reads it to the close.)
void JsonErrorAndClose(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_header("Connection", "close");
  const std::string body = Dump(nlohmann::json{{"error", message}});
  res.set_content_provider("application/json", [body](size_t, httplib::DataSink& sink) {
    sink.write(body.data(), body.size());
    return false;
  });
}

// The API's POST routes: their bodies are read through BodyReader, the only bodies the
// server reads.
const char kFaultsRoute[] = R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/faults)";
const char kCodeRoute[] = R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/code)";

bool ExpectsBody(const httplib::Request& req) {
  return req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" ||
         req.method == "PRI";
}

// A request body, read with a bound: at most `max` bytes are kept. A larger body is read
// on and dropped up to kMaxDrainFactor times the bound (so the connection can serve the
// next request), then abandoned (the connection must be closed).
constexpr size_t kMaxDrainFactor = 4;
struct BoundedBody {
  std::string body;
  bool too_large = false;
  bool abandoned = false;  // the body was not read to its end
  bool failed = false;     // the body could not be read (malformed chunks, timeout)
};

bool Chunked(const httplib::Request& req) {
  return absl::AsciiStrToLower(req.get_header_value("Transfer-Encoding")) == "chunked";
}

BoundedBody ReadBoundedBody(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& reader, size_t max) {
  BoundedBody out;
  // Neither a length nor chunks: the body is empty (RFC 9112 section 6.3); cpp-httplib
  // would read to the end of the connection.
  if (!req.has_header("Content-Length") && !Chunked(req)) return out;
  size_t seen = 0;
  // A declared length above the bound is refused by cpp-httplib itself before any of the
  // body is kept (payload_max_length): it drops the body and sets 413.
  const bool ok = reader([&](const char* data, size_t n) {
    seen += n;
    if (seen <= max) {
      out.body.append(data, n);
      return true;
    }
    out.too_large = true;
    out.body.clear();
    if (seen > kMaxDrainFactor * max) {
      out.abandoned = true;
      return false;
    }
    return true;
  });
  if (res.status == 413) out.too_large = true;
  if (!ok && !out.too_large) out.failed = true;
  res.status = -1;  // the handler answers
  return out;
}

// Answers a body that could not be taken; true when it did.
bool RefuseBody(const BoundedBody& b, size_t max, httplib::Response& res) {
  if (b.too_large) {
    const std::string message =
        absl::StrCat("request body too large: at most ", max, " bytes are accepted");
    if (b.abandoned) {
      JsonErrorAndClose(res, 413, message);
    } else {
      JsonError(res, 413, message);
    }
    return true;
  }
  if (b.failed) {
    JsonErrorAndClose(res, 400, "the request body could not be read (malformed chunks or the client stalled)");
    return true;
  }
  return false;
}

int HttpCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

}  // namespace

void StaticJobDirectory::ForEachJob(const std::function<void(JobController&)>& fn) {
  for (JobController* j : jobs_) fn(*j);
}

bool StaticJobDirectory::WithJob(const std::string& ns, const std::string& name,
                                 const std::function<void(JobController&)>& fn) {
  for (JobController* j : jobs_) {
    if (j->key() == JobKey(ns, name)) {
      fn(*j);
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> StaticJobDirectory::UpdateCode(const std::string& ns, const std::string& name,
                                                           const CodeUpdateRequest& request) {
  absl::StatusOr<int64_t> generation = absl::NotFoundError(absl::StrCat("no job ", ns, "/", name));
  WithJob(ns, name, [&](JobController& j) { generation = j.UpdateJob(ApplyCodeUpdate(j.job(), request)); });
  if (!generation.ok()) return generation.status();
  return absl::StrCat("job ", ns, "/", name, ": code revision ", request.revision, " accepted (generation ",
                      *generation, "); ",
                      request.urgent ? "urgent: training restarts in place with it now"
                                     : "lazy: applied at the next failure-triggered restart or when the "
                                       "hot-update window expires");
}

HttpServer::HttpServer(std::vector<JobController*> jobs, ControllerMetrics* metrics, FaultSink* faults)
    : owned_directory_(std::make_unique<StaticJobDirectory>(std::move(jobs))),
      directory_(owned_directory_.get()),
      metrics_(metrics),
      faults_(faults),
      server_(std::make_unique<httplib::Server>()) {}

HttpServer::HttpServer(JobDirectory* directory, ControllerMetrics* metrics, FaultSink* faults)
    : directory_(directory), metrics_(metrics), faults_(faults), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

std::optional<ApiUser> HttpServer::Authenticate(const std::string& authorization, httplib::Response& res) {
  if (authorizer_ == nullptr) return ApiUser{};
  const std::optional<std::string> token = BearerToken(authorization);
  if (!token) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"peregrine\"");
    JsonError(res, 401,
              authorization.empty() ? "this API needs an Authorization: Bearer <token> header (a Kubernetes token)"
                                    : "the Authorization header is not \"Bearer <token>\"");
    return std::nullopt;
  }
  absl::StatusOr<ApiUser> user = authorizer_->Authenticate(*token);
  if (!user.ok()) {
    if (user.status().code() == absl::StatusCode::kUnauthenticated) {
      res.set_header("WWW-Authenticate", "Bearer realm=\"peregrine\", error=\"invalid_token\"");
      JsonError(res, 401, std::string(user.status().message()));
    } else {
      JsonError(res, 503, std::string(user.status().message()));
    }
    return std::nullopt;
  }
  return *std::move(user);
}

std::optional<ApiUser> HttpServer::Admit(const std::string& authorization, const ResourceAccess& access,
                                         httplib::Response& res) {
  std::optional<ApiUser> user = Authenticate(authorization, res);
  if (!user || authorizer_ == nullptr) return user;
  absl::StatusOr<AccessDecision> decision = authorizer_->Authorize(*user, access);
  if (!decision.ok()) {
    JsonError(res, 503, std::string(decision.status().message()));
    return std::nullopt;
  }
  if (!decision->allowed) {
    JsonError(res, 403, RefusalMessage(*user, access, decision->reason));
    return std::nullopt;
  }
  return user;
}

void HttpServer::RegisterApi() {
  server_->Get("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string authorization = req.get_header_value("Authorization");
    std::optional<ApiUser> user = Authenticate(authorization, res);
    if (!user) return;
    std::vector<std::pair<std::string, nlohmann::json>> jobs;  // namespace, entry
    directory_->ForEachJob([&](JobController& j) {
      const JobStatus st = j.Snapshot();
      const TrainingJob job = j.job();
      jobs.emplace_back(job.metadata.namespace_,
                        nlohmann::json{{"namespace", job.metadata.namespace_}, {"name", job.metadata.name},
                                       {"phase", JobPhaseName(st.phase)}, {"machines", job.spec.machines},
                                       {"lastCompletedStep", st.last_completed_step}, {"ettr", st.ettr}});
    });
    // Who may list every namespace sees every job; else each namespace is asked for
    // (the reviews run outside the directory's callbacks).
    std::map<std::string, bool> allowed;
    bool all = authorizer_ == nullptr;
    if (!all) {
      auto decision = authorizer_->Authorize(*user, RequiredAccess(ApiRoute::kListJobs, "", ""));
      if (!decision.ok()) return JsonError(res, 503, std::string(decision.status().message()));
      all = decision->allowed;
    }
    if (!all) {
      for (const auto& [ns, unused] : jobs) {
        if (allowed.count(ns) > 0) continue;
        auto decision = authorizer_->Authorize(*user, RequiredAccess(ApiRoute::kListJobs, ns, ""));
        if (!decision.ok()) return JsonError(res, 503, std::string(decision.status().message()));
        allowed[ns] = decision->allowed;
      }
    }
    nlohmann::json out = nlohmann::json::array();
    for (auto& [ns, entry] : jobs) {
      if (all || allowed[ns]) out.push_back(std::move(entry));
    }
    res.set_content(Dump(out), "application/json");
  });
  server_->Get(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kGetJob, ns, name), res)) return;
    nlohmann::json out;
    const bool found = directory_->WithJob(ns, name, [&](JobController& j) {
      const TrainingJob job = j.job();
      out["namespace"] = job.metadata.namespace_;
      out["name"] = job.metadata.name;
      out["generation"] = job.metadata.generation;
      out["spec"] = {{"machines", job.spec.machines}, {"gpusPerMachine", job.spec.gpus_per_machine},
                     {"parallelism", {{"tensor", job.spec.parallelism.tensor},
                                      {"pipeline", job.spec.parallelism.pipeline},
                                      {"data", job.spec.parallelism.data}}},
                     {"codeVersion", {{"image", job.spec.code.image}, {"command", job.spec.code.command},
                                      {"revision", job.spec.code.revision}}}};
      out["status"] = nlohmann::json::parse(JobStatusToJson(j.Snapshot(), -1, StatusForm::kFull));
      nlohmann::json timeline = nlohmann::json::array();
      for (const TimelineEntry& e : j.Timeline()) timeline.push_back({{"at", FormatRfc3339(e.at)}, {"what", e.what}});
      out["timeline"] = timeline;
    });
    if (!found) return JsonError(res, 404, absl::StrCat("no job ", ns, "/", name));
    res.set_content(Dump(out), "application/json");
  });
  // Every machine of the job: the TrainingJob status lists a large job's compactly.
  server_->Get(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/machines)", [this](const httplib::Request& req,
                                                                           httplib::Response& res) {
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kGetJob, ns, name), res)) return;
    nlohmann::json out;
    const bool found = directory_->WithJob(ns, name, [&](JobController& j) {
      const nlohmann::json status = nlohmann::json::parse(JobStatusToJson(j.Snapshot(), -1, StatusForm::kFull));
      out = {{"namespace", ns}, {"name", name}, {"summary", status["machineSummary"]},
             {"machines", status["machines"]}, {"standby", status["standby"]}};
    });
    if (!found) return JsonError(res, 404, absl::StrCat("no job ", ns, "/", name));
    res.set_content(Dump(out), "application/json");
  });
  server_->Post(kFaultsRoute, [this](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
    const BoundedBody body = ReadBoundedBody(req, res, reader, limits_.max_body_bytes);
    if (RefuseBody(body, limits_.max_body_bytes, res)) return;
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kInjectFault, ns, name), res)) return;
    if (faults_ == nullptr) return JsonError(res, 409, "fault injection needs local mode");
    auto request = ParseFaultRequest(body.body);
    if (!request.ok()) return JsonError(res, 400, std::string(request.status().message()));
    absl::StatusOr<std::string> result = absl::NotFoundError("no such job");
    directory_->WithJob(ns, name, [&](JobController& j) {
      result = faults_->Inject(*request, j.Snapshot());
      if (result.ok()) j.Note(absl::StrCat("Fault injected: ", *result));
    });
    if (!result.ok()) return JsonError(res, HttpCode(result.status()), std::string(result.status().message()));
    res.set_content(Dump(nlohmann::json{{"result", *result}}), "application/json");
  });
  server_->Post(kCodeRoute, [this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) {
    const BoundedBody body = ReadBoundedBody(req, res, reader, limits_.max_body_bytes);
    if (RefuseBody(body, limits_.max_body_bytes, res)) return;
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kUpdateCode, ns, name), res)) return;
    auto request = ParseCodeUpdateRequest(body.body);
    if (!request.ok()) return JsonError(res, 400, std::string(request.status().message()));
    auto message = directory_->UpdateCode(ns, name, *request);
    if (!message.ok()) return JsonError(res, HttpCode(message.status()), std::string(message.status().message()));
    res.set_content(Dump(nlohmann::json{{"message", *message}}), "application/json");
  });
}

absl::Status ValidateHttpLimits(const HttpLimits& l) {
  auto positive = [](const char* field, long long v) {
    return v > 0 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("http limits: ", field, " must be positive, got ", v));
  };
  for (const absl::Status& s :
       {positive("max_body_bytes", static_cast<long long>(l.max_body_bytes)),
        positive("max_connections", l.max_connections), positive("max_queued_connections", l.max_queued_connections),
        positive("read_timeout_seconds", l.read_timeout_seconds),
        positive("write_timeout_seconds", l.write_timeout_seconds),
        positive("idle_timeout_seconds", l.idle_timeout_seconds),
        positive("max_requests_per_connection", l.max_requests_per_connection)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// The connections accepted and not yet served, shared by the server's task queue (which
// cpp-httplib owns and destroys when its listener ends) and HttpServer::Stop().
struct ConnectionQueueState {
  std::mutex mu;
  std::condition_variable work_cv;  // a connection waits
  std::condition_variable room_cv;  // the queue has room
  std::deque<std::function<void()>> waiting;  // guarded by mu; each serves and closes one connection
  bool stopping = false;                      // guarded by mu
  size_t max_queued = 0;
  size_t workers = 0;

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    work_cv.notify_all();
    room_cv.notify_all();
  }
};

namespace {

// cpp-httplib's TaskQueue hook (Server::new_task_queue): the listener thread enqueues one
// task per accepted connection. A fixed set of workers serves them; while more wait than
// there are workers, the newest is served first (a stalled flood cannot delay a new
// request by more than one read timeout), and a full queue blocks the listener, which then
// stops accepting. Every task runs, even after Stop(): it is what closes its connection
// (at once once the server stopped).
class ConnectionQueue final : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(std::shared_ptr<ConnectionQueueState> state) : state_(std::move(state)) {
    for (size_t i = 0; i < state_->workers; ++i) workers_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->room_cv.wait(lock, [&] { return state_->stopping || state_->waiting.size() < state_->max_queued; });
      state_->waiting.push_back(std::move(fn));
    }
    state_->work_cv.notify_one();
  }

  // Called by the listener once it stopped accepting.
  void shutdown() override {
    state_->Stop();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    // Connections the workers left (enqueued as they exited): closed here.
    std::deque<std::function<void()>> left;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      left.swap(state_->waiting);
    }
    for (std::function<void()>& fn : left) fn();
  }

  ~ConnectionQueue() override {
    if (!workers_.empty()) shutdown();
  }

 private:
  void Work() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(state_->mu);
        state_->work_cv.wait(lock, [&] { return state_->stopping || !state_->waiting.empty(); });
        if (state_->waiting.empty()) return;
        if (state_->waiting.size() > state_->workers) {
          fn = std::move(state_->waiting.back());
          state_->waiting.pop_back();
        } else {
          fn = std::move(state_->waiting.front());
          state_->waiting.pop_front();
        }
      }
      state_->room_cv.notify_one();
      fn();
    }
  }

  const std::shared_ptr<ConnectionQueueState> state_;
  std::vector<std::thread> workers_;
};

}  // namespace

void HttpServer::ApplyLimits() {
  server_->set_payload_max_length(limits_.max_body_bytes);
  server_->set_read_timeout(limits_.read_timeout_seconds, 0);
  server_->set_write_timeout(limits_.write_timeout_seconds, 0);
  server_->set_keep_alive_timeout(limits_.idle_timeout_seconds);
  server_->set_keep_alive_max_count(static_cast<size_t>(limits_.max_requests_per_connection));
  queue_ = std::make_shared<ConnectionQueueState>();
  queue_->max_queued = static_cast<size_t>(limits_.max_queued_connections);
  queue_->workers = static_cast<size_t>(limits_.max_connections);
  server_->new_task_queue = [state = queue_] { return new ConnectionQueue(state); };
  // A body is read only by the API's POST routes (bounded there); any other request that
  // carries one is answered without reading it.
  const bool api = endpoints_ != HttpEndpoints::kMetricsOnly;
  server_->set_pre_routing_handler([api](const httplib::Request& req, httplib::Response& res) {
    if (!ExpectsBody(req)) return httplib::Server::HandlerResponse::Unhandled;
    static const std::regex faults(kFaultsRoute), code(kCodeRoute);
    if (api && req.method == "POST" && (std::regex_match(req.path, faults) || std::regex_match(req.path, code))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    JsonErrorAndClose(res, 404, absl::StrCat("no endpoint ", req.method, " ", req.path));
    return httplib::Server::HandlerResponse::Handled;
  });
}

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  if (absl::Status valid = ValidateHttpLimits(limits_); !valid.ok()) return valid;
  ApplyLimits();
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  if (endpoints_ != HttpEndpoints::kApiOnly) {
    server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  if (endpoints_ != HttpEndpoints::kMetricsOnly) RegisterApi();
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on http ", host, ":", port));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib 0.11 has no wait_until_ready(): wait for the listener thread to be running.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  if (!server_->is_running()) return absl::UnavailableError(absl::StrCat("http server on port ", bound, " did not start"));
  return bound;
}

void HttpServer::Stop() {
  if (queue_) queue_->Stop();  // a listener waiting for room in the queue goes on
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace peregrine
