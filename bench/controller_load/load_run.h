// The controller load test: one real peregrine-controller process in Kubernetes mode,
// against a FakeKubeApiServer in this process, with a simulated cluster (LoadKubelet) and
// thousands of simulated agents on real gRPC streams (AgentFleet) in one TrainingJob.
//
// RunControllerLoad starts it all, submits the job, waits until every agent is connected
// and the job is Running, measures a steady period, then fails `burst_fraction` of the
// machines at once (their streams end and their pods fail) and measures the recovery
// until every slot is held again by a connected agent on the new attempt and the job is
// Running. It reports figures (CPU, memory, decision latency, API requests); it never
// judges them: budgets are printed beside the figures by FormatLoadReport.
//
// Everything it starts is stopped and reaped before it returns, on failure too (the
// controller is a ChildProcess, SIGKILLed with its process group at the latest). Not
// thread-safe: one caller at a time per process (the controller's ports are picked free).
// Errors: kDeadlineExceeded naming the phase that did not finish within its deadline
// (with what was reached), kInternal when something could not be started.
#ifndef PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_RUN_H_
#define PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_RUN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/controller_load/agent_fleet.h"

namespace peregrine::loadtest {

struct LoadTestOptions {
  std::string controller_binary;  // peregrine-controller
  int machines = 12500;
  int gpus_per_machine = 8;
  int standbys = -1;               // spec.standby.min = max; -1: leave it to the controller's sizing
  double burst_fraction = 0.01;    // machines failed at once (at least one)
  absl::Duration settle = absl::Seconds(10);  // after startup, before the steady window
  absl::Duration steady = absl::Seconds(60);  // the measured steady window
  absl::Duration startup_deadline = absl::Minutes(30);
  absl::Duration recovery_deadline = absl::Minutes(5);
  int ticker_threads = 2;
  int streams_per_connection = 1;
  absl::Duration step_time = absl::Seconds(1);
  std::string log_level = "warning";  // the controller's
  std::string work_dir;               // kubeconfig, key, controller log; "": a temp dir, removed after
  size_t api_history_limit = 2000;    // the fake API server's kept write events
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;  // a line per phase; may be empty
};

using RequestCounts = std::map<std::pair<std::string, std::string>, int>;  // (verb, resource) -> n

struct LoadReport {
  int machines = 0, gpus_per_machine = 0, standbys = 0, burst_machines = 0;
  int streams_per_connection = 1, ticker_threads = 0;
  double load_average_start = 0, load_average_end = 0;  // /proc/loadavg (1 min): the machine's other load
  absl::Duration startup;  // job submitted -> every agent connected and the job Running

  // Steady period.
  absl::Duration steady_window;
  double steady_cpu_cores = 0;      // the controller's CPU as a share of one core
  double steady_cpu_max_cores = 0;  // the busiest sampling interval (about 1 s)
  double generator_cpu_cores = 0;   // this process (agents + fake API server + kubelet)
  uint64_t steady_rss_kib = 0;
  RequestCounts steady_requests;
  uint64_t heartbeats_per_second = 0;

  // The burst.
  absl::Duration burst_apply;  // to fail every burst machine
  std::optional<absl::Duration> first_reacting_status;  // a status write showing Recovering
  std::optional<absl::Duration> first_event;            // an Event created
  std::optional<absl::Duration> first_delete, first_create, all_failed_deleted, running_again;
  std::optional<absl::Duration> decision;  // the first of status, delete and create
  absl::Duration recovery;                 // burst -> every slot held again (the wait's end)
  double burst_cpu_cores = 0, burst_cpu_max_cores = 0;
  RequestCounts recovery_requests;
  uint64_t peak_rss_kib = 0, end_rss_kib = 0;

  // Correctness.
  int connected_before_burst = 0;
  int failed_pods_deleted = 0;
  int replaced = 0;            // slots now held by agents of pods that were not slots before
  int evictions = 0;           // status.evictedMachines after the recovery
  int job_recoveries = 0;      // status.recoveries
  int kubelet_errors = 0;
  FleetCounts fleet;           // at the end, before shutdown
  int open_streams_after_shutdown = 0;
};

absl::StatusOr<LoadReport> RunControllerLoad(const LoadTestOptions& options);

// The figures as a table for people, each beside its budget where the issue set one.
std::string FormatLoadReport(const LoadReport& report);

}  // namespace peregrine::loadtest

#endif  // PEREGRINE_BENCH_CONTROLLER_LOAD_LOAD_RUN_H_
