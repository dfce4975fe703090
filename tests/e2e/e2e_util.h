// Helpers for end-to-end tests: a LocalMode that is always torn down (even when a REQUIRE
// fails), the demo job with a short run, and a check that no process of a pod survived.
// Temporary directories come from the kit (tests/testing/temp_dir.h).
#ifndef PEREGRINE_TESTS_E2E_E2E_UTIL_H_
#define PEREGRINE_TESTS_E2E_E2E_UTIL_H_

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "controller/job_parser.h"
#include "controller/local/local_cluster.h"
#include "controller/local/local_mode.h"
#include "controller/local/scenario.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::e2e {

using ::peregrine::testing::TempDir;

// Tears the local cluster down on scope exit, whatever happened.
struct ModeGuard {
  std::unique_ptr<LocalMode> mode;
  bool teardown = true;
  ~ModeGuard() {
    if (mode) mode->Shutdown(teardown);
  }
  LocalMode* operator->() { return mode.get(); }
  LocalMode& operator*() { return *mode; }
};

inline TrainingJob ShortDemoJob(int steps) {
  auto job = LoadTrainingJobFile(PEREGRINE_SOURCE_DIR "/examples/local-demo.yaml");
  REQUIRE(job.ok());
  job->spec.code.command = {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2",
                            "--hidden", "64", "--compute-ms", "4"};
  job->spec.fault_tolerance.restart_grace_seconds = 2;
  return *job;
}

inline LocalModeOptions Options(const std::string& state_dir) {
  LocalModeOptions o;
  o.state_dir = state_dir;
  o.bin_dir = PEREGRINE_BINARY_DIR "/bin";
  o.heartbeat_ms = 200;
  return o;
}

// Waits for the job status to satisfy pred; generous deadline (a broken test only).
inline bool WaitForStatus(LocalMode& mode, const std::function<bool(const JobStatus&)>& pred, int seconds = 240) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (mode.controller().WaitFor(pred, 500)) return true;
  }
  return false;
}

inline bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

}  // namespace peregrine::e2e

#endif  // PEREGRINE_TESTS_E2E_E2E_UTIL_H_
