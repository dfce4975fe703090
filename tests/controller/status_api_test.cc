// The controller's HTTP API gives the full detail the TrainingJob status leaves out: a
// job larger than kMaxListedMachines keeps its slots compactly in the stored status
// (machineTable), and GET /api/v1/jobs/{namespace}/{name}/machines lists every one, on a
// real HTTP server on loopback.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/agent_registry.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "controller/job_controller.h"
#include "controller/status_compact.h"
#include "controller/status_json.h"
#include "tests/testing/fake_cluster.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

TEST_CASE("GET /api/v1/jobs/NS/NAME/machines lists every machine of a job whose stored status keeps them compactly", "[integration]") {
  constexpr int kMachines = 200;
  testing::PlanWorld w(testing::TrainJob(kMachines, 8, 8), "node-pool-a-");
  w.Step();
  w.Step();
  REQUIRE(w.status.slots.size() == kMachines);
  // The status as the API server stores it: no per-machine list, the compact table.
  const std::string stored = JobStatusToJson(w.status);
  const nlohmann::json stored_json = nlohmann::json::parse(stored);
  CHECK_FALSE(stored_json.contains("machines"));
  REQUIRE(stored_json.contains("machineTable"));
  CHECK(stored_json["machineSummary"]["total"] == kMachines);
  absl::StatusOr<JobStatus> persisted = JobStatusFromJson(stored);
  REQUIRE(persisted.ok());

  // A controller that restarts from it.
  testing::FakeCluster cluster;
  cluster.SetPersistedStatus(*persisted);
  AgentRegistry registry{"test-controller"};
  ControllerMetrics metrics;
  JobController controller(w.job, &cluster, &registry, &metrics, JobController::Options{});
  REQUIRE(controller.Start(/*run_loop=*/false).ok());
  HttpServer http{std::vector<JobController*>{&controller}, &metrics, nullptr};
  absl::StatusOr<int> port = http.Start("127.0.0.1", 0);
  REQUIRE(port.ok());
  httplib::Client client("127.0.0.1", *port);
  client.set_read_timeout(60, 0);
  const std::string job = w.job.metadata.namespace_ + "/" + w.job.metadata.name;

  httplib::Result r = client.Get("/api/v1/jobs/" + job + "/machines");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const nlohmann::json body = nlohmann::json::parse(r->body);
  CHECK(body["summary"]["total"] == kMachines);
  CHECK(body["summary"]["observed"] == kMachines);
  REQUIRE(body["machines"].size() == kMachines);
  for (int i = 0; i < kMachines; ++i) {
    const nlohmann::json& m = body["machines"][i];
    INFO("slot " << i);
    CHECK(m["index"] == i);
    CHECK(m["pod"] == w.status.slots[i].pod);
    CHECK(m["machineId"] == w.status.slots[i].machine_id);
    CHECK(m["observed"] == true);
  }
  CHECK(body["standby"]["pods"].size() == w.status.standbys.size());

  // The job's own route serves the full form too.
  r = client.Get("/api/v1/jobs/" + job);
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(nlohmann::json::parse(r->body)["status"]["machines"].size() == kMachines);

  r = client.Get("/api/v1/jobs/" + w.job.metadata.namespace_ + "/no-such-job/machines");
  REQUIRE(r);
  CHECK(r->status == 404);
  http.Stop();
}

}  // namespace
}  // namespace peregrine
