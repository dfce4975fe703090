#include "controller/http_server.h"

#include <httplib.h>

#include <chrono>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

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
      out["status"] = nlohmann::json::parse(JobStatusToJson(j.Snapshot()));
      nlohmann::json timeline = nlohmann::json::array();
      for (const TimelineEntry& e : j.Timeline()) timeline.push_back({{"at", FormatRfc3339(e.at)}, {"what", e.what}});
      out["timeline"] = timeline;
    });
    if (!found) return JsonError(res, 404, absl::StrCat("no job ", ns, "/", name));
    res.set_content(Dump(out), "application/json");
  });
  server_->Post(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/faults)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kInjectFault, ns, name), res)) return;
    if (faults_ == nullptr) return JsonError(res, 409, "fault injection needs local mode");
    auto request = ParseFaultRequest(req.body);
    if (!request.ok()) return JsonError(res, 400, std::string(request.status().message()));
    absl::StatusOr<std::string> result = absl::NotFoundError("no such job");
    directory_->WithJob(ns, name, [&](JobController& j) {
      result = faults_->Inject(*request, j.Snapshot());
      if (result.ok()) j.Note(absl::StrCat("Fault injected: ", *result));
    });
    if (!result.ok()) return JsonError(res, HttpCode(result.status()), std::string(result.status().message()));
    res.set_content(Dump(nlohmann::json{{"result", *result}}), "application/json");
  });
  server_->Post(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/code)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1], name = req.matches[2];
    if (!Admit(req.get_header_value("Authorization"), RequiredAccess(ApiRoute::kUpdateCode, ns, name), res)) return;
    auto request = ParseCodeUpdateRequest(req.body);
    if (!request.ok()) return JsonError(res, 400, std::string(request.status().message()));
    auto message = directory_->UpdateCode(ns, name, *request);
    if (!message.ok()) return JsonError(res, HttpCode(message.status()), std::string(message.status().message()));
    res.set_content(Dump(nlohmann::json{{"message", *message}}), "application/json");
  });
}

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
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
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace peregrine
