#include "controller/http_server.h"

#include <httplib.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

void JsonError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
}

int HttpCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    default: return 500;
  }
}

}  // namespace

HttpServer::HttpServer(std::vector<JobController*> jobs, ControllerMetrics* metrics, FaultInjector* injector)
    : jobs_(std::move(jobs)), metrics_(metrics), injector_(injector), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

JobController* HttpServer::Find(const std::string& ns, const std::string& name) const {
  for (JobController* j : jobs_) {
    if (j->job().metadata.namespace_ == ns && j->job().metadata.name == name) return j;
  }
  return nullptr;
}

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/api/v1/jobs", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json out = nlohmann::json::array();
    for (JobController* j : jobs_) {
      const JobStatus st = j->Snapshot();
      out.push_back({{"namespace", j->job().metadata.namespace_}, {"name", j->job().metadata.name},
                     {"phase", JobPhaseName(st.phase)}, {"machines", j->job().spec.machines},
                     {"lastCompletedStep", st.last_completed_step}, {"ettr", st.ettr}});
    }
    res.set_content(out.dump(), "application/json");
  });
  server_->Get(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    JobController* j = Find(req.matches[1], req.matches[2]);
    if (j == nullptr) return JsonError(res, 404, absl::StrCat("no job ", std::string(req.matches[1]), "/", std::string(req.matches[2])));
    nlohmann::json out;
    out["namespace"] = j->job().metadata.namespace_;
    out["name"] = j->job().metadata.name;
    out["spec"] = {{"machines", j->job().spec.machines}, {"gpusPerMachine", j->job().spec.gpus_per_machine},
                   {"parallelism", {{"tensor", j->job().spec.parallelism.tensor},
                                    {"pipeline", j->job().spec.parallelism.pipeline},
                                    {"data", j->job().spec.parallelism.data}}}};
    out["status"] = nlohmann::json::parse(JobStatusToJson(j->Snapshot()));
    nlohmann::json timeline = nlohmann::json::array();
    for (const TimelineEntry& e : j->Timeline()) timeline.push_back({{"at", FormatRfc3339(e.at)}, {"what", e.what}});
    out["timeline"] = timeline;
    res.set_content(out.dump(), "application/json");
  });
  server_->Post(R"(/api/v1/jobs/([a-z0-9-]+)/([a-z0-9-]+)/faults)", [this](const httplib::Request& req, httplib::Response& res) {
    JobController* j = Find(req.matches[1], req.matches[2]);
    if (j == nullptr) return JsonError(res, 404, "no such job");
    if (injector_ == nullptr) return JsonError(res, 409, "fault injection needs local mode");
    auto request = ParseFaultRequest(req.body);
    if (!request.ok()) return JsonError(res, 400, std::string(request.status().message()));
    auto result = injector_->Inject(*request, j->Snapshot());
    if (!result.ok()) return JsonError(res, HttpCode(result.status()), std::string(result.status().message()));
    j->Note(absl::StrCat("Fault injected: ", *result));
    res.set_content(nlohmann::json{{"result", *result}}.dump(), "application/json");
  });
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
