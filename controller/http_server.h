// HttpServer: the controller's HTTP endpoint: /healthz, /metrics (Prometheus text format)
// and the JSON API peregrinectl uses:
//   GET  /api/v1/jobs                         -> [{namespace, name, phase, ...}]
//   GET  /api/v1/jobs/{namespace}/{name}      -> {status, timeline}
//   POST /api/v1/jobs/{namespace}/{name}/faults (local mode) -> {result}
// Errors are JSON {"error": "..."} with 400 (bad request, naming the field), 404, 500.
//
// Thread-safe; Start() serves on a thread pool until Stop(). The controllers, metrics and
// injector must outlive the server.
#ifndef PEREGRINE_CONTROLLER_HTTP_SERVER_H_
#define PEREGRINE_CONTROLLER_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/controller_metrics.h"
#include "controller/fault_injector.h"
#include "controller/job_controller.h"

namespace httplib {
class Server;
}

namespace peregrine {

class HttpServer {
 public:
  HttpServer(std::vector<JobController*> jobs, ControllerMetrics* metrics, FaultInjector* injector);
  ~HttpServer();

  // Binds host:port (port 0 picks one) and starts serving; returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  JobController* Find(const std::string& ns, const std::string& name) const;

  std::vector<JobController*> jobs_;
  ControllerMetrics* metrics_;
  FaultInjector* injector_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_HTTP_SERVER_H_
