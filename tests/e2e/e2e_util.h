// Helpers for end-to-end tests: a LocalMode that is always torn down (even when a REQUIRE
// fails), the demo job with a short run, waits on the job's status, faults to inject, the
// checks every fault scenario ends with (which machines were evicted, which stayed) and a
// check that no process of a pod survived. A failed start or wait fails the test (Catch2
// REQUIRE). Temporary directories come from the kit (tests/testing/temp_dir.h).
#ifndef PEREGRINE_TESTS_E2E_E2E_UTIL_H_
#define PEREGRINE_TESTS_E2E_E2E_UTIL_H_

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

// Starts `job` in local mode; REQUIREs that it starts (the error is shown).
inline ModeGuard StartMode(const TrainingJob& job, const LocalModeOptions& options) {
  auto started = LocalMode::Start(job, options);
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  return ModeGuard{std::move(*started)};
}

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

inline bool Finished(const JobStatus& s) { return s.phase == JobPhase::kSucceeded || s.phase == JobPhase::kFailed; }

// The incident timeline as FormatTimeline prints it, from its first entry.
inline std::string TimelineText(LocalMode& mode, const JobStatus& status) {
  const std::vector<TimelineEntry> timeline = mode.controller().Timeline();
  return FormatTimeline(timeline, status, timeline.empty() ? 0 : timeline.front().at);
}

// What each timeline entry says, one line each.
inline std::string TimelineEvents(LocalMode& mode) {
  std::string out;
  for (const TimelineEntry& e : mode.controller().Timeline()) out += e.what + "\n";
  return out;
}

// Waits until the job is Running with step `step` completed and `also` (when given) holds
// for its status; returns the status then.
inline JobStatus WaitRunning(LocalMode& mode, uint64_t step, const std::function<bool(const JobStatus&)>& also = {}) {
  REQUIRE(WaitForStatus(mode, [&](const JobStatus& s) {
    return s.phase == JobPhase::kRunning && s.last_completed_step >= step && (!also || also(s));
  }));
  return mode.controller().Snapshot();
}

// Waits until the job succeeded or failed; returns its final status (the timeline is shown
// when it never finishes).
inline JobStatus WaitFinished(LocalMode& mode) {
  const bool finished = WaitForStatus(mode, Finished);
  const JobStatus status = mode.controller().Snapshot();
  INFO(TimelineText(mode, status));
  REQUIRE(finished);
  return status;
}

// A fault on machine slot `slot` (-1: the fault's default) and GPU `local_rank` (-1: every
// GPU of the machine).
inline FaultRequest Fault(const std::string& kind, int slot = -1, int local_rank = -1) {
  FaultRequest f;
  f.kind = kind;
  f.slot = slot;
  f.local_rank = local_rank;
  return f;
}

// A one-off crash of GPU `local_rank` of slot `slot`: injected, then cleared (that GPU's
// crash only) as soon as the controller opened an incident for it.
inline void CrashOnce(LocalMode& mode, int slot, int local_rank) {
  REQUIRE(mode.Inject(Fault("crash", slot, local_rank)).ok());
  REQUIRE(WaitForStatus(mode, [](const JobStatus& s) { return !s.incidents.empty(); }));
  REQUIRE(mode.Inject(Fault("clear", slot, local_rank)).ok());
}

// The machines evicted for a fault (evictions of standbys that failed are left out).
inline std::set<std::string> EvictedMachines(const JobStatus& s) {
  std::set<std::string> out;
  for (const Eviction& e : s.evicted) {
    if (e.reason.rfind("standby failed", 0) != 0) out.insert(e.machine_id);
  }
  return out;
}

// Exactly the machines that held `slots` in `before` were evicted; those slots hold none
// of them in `after`, every other slot kept its machine.
inline void CheckOnlyEvicted(const JobStatus& before, const JobStatus& after, const std::set<int>& slots) {
  std::set<std::string> evicted;
  for (int slot : slots) evicted.insert(before.slots.at(static_cast<size_t>(slot)).machine_id);
  CHECK(EvictedMachines(after) == evicted);
  REQUIRE(after.slots.size() == before.slots.size());
  for (size_t i = 0; i < after.slots.size(); ++i) {
    INFO("slot " << i);
    if (slots.count(static_cast<int>(i)) > 0) {
      CHECK(evicted.count(after.slots[i].machine_id) == 0);
    } else {
      CHECK(after.slots[i].machine_id == before.slots[i].machine_id);
    }
  }
}

// A broken code update rolled back: the first incident was reattempted and the second rolled
// the update back; the code is `job`'s again and `broken_revision` is marked rolled back.
inline void CheckRolledBack(const JobStatus& st, const TrainingJob& job, const std::string& broken_revision) {
  REQUIRE(st.incidents.size() >= 2);
  CHECK_THAT(st.incidents[0].decision, Catch::Contains("reattempt"));
  CHECK_THAT(st.incidents[1].decision, Catch::Contains("roll back"));
  CHECK(st.code.revision == job.spec.code.revision);
  CHECK(st.code.command == job.spec.code.command);
  bool rolled_back = false;
  for (const VersionRecord& v : st.version_history) {
    rolled_back = rolled_back || (v.code.revision == broken_revision && v.outcome == VersionOutcome::kRolledBack);
  }
  CHECK(rolled_back);
}

// The controller's live /metrics text; REQUIREs an HTTP 200.
inline std::string ScrapeMetrics(LocalMode& mode) {
  httplib::Client http("127.0.0.1", mode.http_port());
  auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  REQUIRE(metrics->status == 200);
  return metrics->body;
}

inline bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

}  // namespace peregrine::e2e

#endif  // PEREGRINE_TESTS_E2E_E2E_UTIL_H_
