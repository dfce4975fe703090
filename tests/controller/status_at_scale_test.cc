// The TrainingJob status of a large job as the real decision core writes it: a job of N
// machines x 8 GPUs run through DecideJob (pods running, agents converged, a checkpoint
// committed, the standby pool filled), then a burst of 1% of its machines failing at
// once, decided and mid-recovery (standbys activated, every pod restoring). The status is
// serialised by the real writer (JobStatusToJson) and its size printed by top-level field.
// The bound: <= 512 KiB at 12,500 machines (100,000 GPUs), steady and during the burst.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/decision_engine.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr size_t kStatusBudget = 512 * 1024;
// Node names as a managed cluster gives them (pool and instance group in the name).
constexpr char kNodePrefix[] = "gke-train-a3-mega-pool-1-7f3c2a1b-";

TrainingJob LargeJob(int machines) {
  return testing::ParsedJob(absl::StrCat(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: llm-pretrain, namespace: ml}
spec:
  machines: )", machines, R"(
  gpusPerMachine: 8
  parallelism: {tensor: 8, pipeline: 5, data: )", machines / 5, R"(}
  codeVersion: {image: "registry.example.com/ml/llm-train:2026-11-01", command: [train], revision: "9f3c2e1"}
  standby: {dailyFailureRate: 0.01, min: 1, max: 256}
  checkpoint: {intervalSteps: 100, backupCopies: 1}
)"));
}

// Every agent of the world (active and standby) reports a checkpoint store holding `step`
// stored, backed up and holding its placement partners' copies.
void ReportCheckpoint(testing::PlanWorld& w, uint64_t step) {
  for (AgentObservation& a : w.obs.agents) {
    CheckpointReportObservation r;
    r.stored_steps = {step};
    r.backed_up_steps = {step};
    r.store_bytes = 80ULL << 30;
    r.memory_budget_bytes = 512ULL << 30;
    a.checkpoint = r;
  }
  for (const CheckpointSlotPlacement& p : w.status.checkpoint.placement) {
    for (int holder : p.holders) {
      AgentObservation* a = w.Agent(w.status.slots[holder].pod);
      if (a != nullptr) a->checkpoint->held.emplace_back(p.slot, step);
    }
  }
}

struct ScaleStatus {
  JobStatus steady;  // running at step 200, checkpoint 200 committed, standbys ready
  JobStatus burst;   // 1% of the machines failed: decided, standbys activated, restoring
};

// Runs the real decision core over a job of `machines` machines; `failed` of them fail
// at once (every 100th slot) after the steady state is reached.
ScaleStatus BuildScaleStatus(int machines, int failed) {
  testing::PlanWorld w(LargeJob(machines), kNodePrefix);
  w.Step();  // pods and standbys created
  w.Step();  // attempt 1 assigned
  REQUIRE(w.status.attempt == 1);
  for (uint64_t step : {100, 200}) {
    w.now += 60 * kSecond;
    w.Progress(step);
    ReportCheckpoint(w, step);
    for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
    w.Step();
  }
  REQUIRE(w.status.phase == JobPhase::kRunning);
  REQUIRE(w.status.checkpoint.last_complete_step == 200);
  ScaleStatus out;
  out.steady = w.status;

  // The burst: `failed` machines' nodes go away at once.
  w.now += 30 * kSecond;
  std::vector<std::string> victims;
  for (int i = 0; i < failed; ++i) {
    const SlotStatus& slot = w.status.slots[static_cast<size_t>(i) * machines / failed];
    PodObservation* p = w.Pod(slot.pod);
    REQUIRE(p != nullptr);
    p->running = false;
    p->failed = true;
    p->reason = "node NotReady: kubelet stopped posting node status";
    victims.push_back(slot.pod);
  }
  for (const std::string& pod : victims) std::erase_if(w.obs.agents, [&](const AgentObservation& a) { return a.pod == pod; });
  for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
  w.Step();       // detected (triage)
  w.now += 10 * kSecond;
  for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
  w.Step();       // decided: evict, activate standbys, restart
  w.now += kSecond;
  for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
  w.Step();       // the new attempt assigned
  // Every pod of the new attempt restores the checkpoint and says so.
  w.now += 5 * kSecond;
  int64_t at = w.now;
  for (AgentObservation& a : w.obs.agents) {
    a.last_seen = w.now;
    a.checkpoint_events.push_back(CheckpointEventObservation{at++, CheckpointEventKind::kRestored, 200, -1,
                                                             "restored step 200 from memory"});
  }
  w.Step();
  REQUIRE(w.status.attempt >= 2);
  REQUIRE_FALSE(w.status.incidents.empty());
  out.burst = w.status;
  return out;
}

// "field bytes" lines, largest first, and the total.
std::string SizeByField(const std::string& status_json) {
  const nlohmann::json j = nlohmann::json::parse(status_json);
  std::vector<std::pair<size_t, std::string>> sizes;
  for (const auto& [key, value] : j.items()) sizes.emplace_back(value.dump().size(), key);
  std::sort(sizes.rbegin(), sizes.rend());
  std::string out = absl::StrFormat("  %-26s %9d bytes\n", "(total)", status_json.size());
  for (const auto& [bytes, key] : sizes) {
    if (bytes < 64) continue;
    absl::StrAppendFormat(&out, "  %-26s %9d bytes\n", key, bytes);
  }
  return out;
}

void Measure(int machines, int failed) {
  const ScaleStatus s = BuildScaleStatus(machines, failed);
  for (const auto& [name, status] : {std::pair<const char*, const JobStatus*>{"steady", &s.steady},
                                     std::pair<const char*, const JobStatus*>{"burst", &s.burst}}) {
    const std::string json = JobStatusToJson(*status);
    const std::string table = SizeByField(json);
    std::cout << "status of " << machines << " machines x 8 GPUs, " << name
              << (status == &s.burst ? absl::StrCat(" (", failed, " machines failed, mid-recovery)") : "") << ":\n"
              << table;
    std::cout << "  budget " << kStatusBudget << " bytes: " << (json.size() <= kStatusBudget ? "within" : "OVER") << "\n";
    // Everything DecideJob resumes from reads back.
    absl::StatusOr<JobStatus> back = JobStatusFromJson(json);
    REQUIRE(back.ok());
    CHECK(back->slots.size() == status->slots.size());
  }
}

TEST_CASE("The status of 1250 machines x 8 GPUs stays under 512 KiB steady and during a 1% burst of failures", "[unit][status-size]") {
  Measure(1'250, 13);
}

TEST_CASE("The status of 12500 machines x 8 GPUs (100000 GPUs) stays under 512 KiB steady and during a 1% burst of failures", "[unit][status-size]") {
  Measure(12'500, 125);
}

}  // namespace
}  // namespace peregrine
