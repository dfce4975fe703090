// The TrainingJob status of a large job as the real decision core writes it: a job of N
// machines x 8 GPUs run through DecideJob (pods running, agents converged, a checkpoint
// committed, the standby pool filled), then a burst of 1% of its machines failing at
// once, decided and mid-recovery (standbys activated, every pod restoring). The status is
// serialised by the real writer (JobStatusToJson) and its size printed by top-level field.
// The bound: <= 512 KiB at 12,500 machines (100,000 GPUs), steady and during the burst.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/decision_engine.h"
#include "controller/status_compact.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr size_t kStatusBudget = 512 * 1024;
// PlanWorld names machines "w<n>"; NodeName turns them into names as a managed cluster
// gives them (pool and instance group, then a random suffix), which share less.
constexpr char kWorldPrefix[] = "w";

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string NodeName(uint64_t n) {
  std::string suffix;
  uint64_t h = Mix(n);
  for (int i = 0; i < 5; ++i, h /= 36) suffix.push_back("0123456789abcdefghijklmnopqrstuvwxyz"[h % 36]);
  return absl::StrCat("gke-train-a3-mega-pool-", n % 4, "-7f3c2a1b-", suffix);
}

// Gives the machines PlanWorld created since the last call their node names.
void NameNodes(testing::PlanWorld& w) {
  auto rename = [](std::string& id) {
    if (id.rfind(kWorldPrefix, 0) == 0 && id.find('-') == std::string::npos) id = NodeName(std::stoull(id.substr(1)));
  };
  for (PodObservation& p : w.obs.pods) rename(p.machine_id);
  for (AgentObservation& a : w.obs.agents) rename(a.machine_id);
}

void Step(testing::PlanWorld& w) {
  w.Step();
  NameNodes(w);
}

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
  std::unique_ptr<testing::PlanWorld> world;  // as it was when `burst` was taken
};

// Runs the real decision core over a job of `machines` machines; `failed` of them fail
// at once (every 100th slot) after the steady state is reached.
ScaleStatus BuildScaleStatus(int machines, int failed) {
  testing::PlanWorld w(LargeJob(machines), kWorldPrefix);
  Step(w);  // pods and standbys created
  Step(w);  // attempt 1 assigned
  REQUIRE(w.status.attempt == 1);
  for (uint64_t step : {100, 200}) {
    w.now += 60 * kSecond;
    w.Progress(step);
    ReportCheckpoint(w, step);
    for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
    Step(w);
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
  Step(w);  // detected (triage)
  w.now += 10 * kSecond;
  for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
  Step(w);  // decided: evict, activate standbys, restart
  w.now += kSecond;
  for (AgentObservation& a : w.obs.agents) a.last_seen = w.now;
  Step(w);  // the new attempt assigned
  // Every pod of the new attempt restores the checkpoint and says so, over 30 s.
  w.now += 30 * kSecond;
  for (AgentObservation& a : w.obs.agents) {
    a.last_seen = w.now;
    const int64_t at = w.now - 30 * kSecond + static_cast<int64_t>(Mix(std::hash<std::string>{}(a.pod)) % (30 * kSecond));
    a.checkpoint_events.push_back(CheckpointEventObservation{at, CheckpointEventKind::kRestored, 200, -1,
                                                             "restored step 200 from memory"});
  }
  Step(w);
  REQUIRE(w.status.attempt >= 2);
  REQUIRE_FALSE(w.status.incidents.empty());
  out.burst = w.status;
  out.world = std::make_unique<testing::PlanWorld>(w);
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

// What DecideJob does next, as text: the stored status it leaves and every action.
std::string PlanText(const JobPlan& plan) {
  std::string out = JobStatusToJson(plan.status);
  for (const PodToCreate& c : plan.create_pods) absl::StrAppend(&out, "\ncreate ", c.name, " ", c.slot);
  for (const PodToDelete& d : plan.delete_pods) absl::StrAppend(&out, "\ndelete ", d.name, " ", d.reason);
  for (const CommandToSend& c : plan.commands) absl::StrAppend(&out, "\ncommand ", c.pod, " ", c.id);
  for (const JobEvent& e : plan.events) absl::StrAppend(&out, "\nevent ", e.reason, " ", e.message);
  for (const QuarantineRequest& q : plan.quarantine) absl::StrAppend(&out, "\nquarantine ", q.machine_id, " ", q.reason);
  return out;
}

// "" when equal, else both texts around the first byte where they differ.
std::string FirstDifference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "";
  const size_t from = i < 80 ? 0 : i - 80;
  return absl::StrCat("at byte ", i, ":\n  ", a.substr(from, 160), "\n  ", b.substr(from, 160));
}

// The state DecideJob resumes from reads back exactly from the stored JSON.
void CheckReadsBack(const JobStatus& want, const JobStatus& got) {
  REQUIRE(got.slots.size() == want.slots.size());
  for (size_t i = 0; i < want.slots.size(); ++i) {
    const SlotStatus &a = want.slots[i], &b = got.slots[i];
    INFO("slot " << i);
    REQUIRE((a.index == b.index && a.pod == b.pod && a.machine_id == b.machine_id && a.observed == b.observed &&
             a.node_unready_since == b.node_unready_since && a.node_unready_step == b.node_unready_step &&
             a.node_unready_progress_at == b.node_unready_progress_at));
  }
  CHECK(got.checkpoint.placement == want.checkpoint.placement);
  std::map<std::string, int64_t> marks;  // a mark of 0 is the same as none
  for (const auto& [pod, at] : want.checkpoint.events_seen) {
    if (at != 0) marks[pod] = at;
  }
  CHECK(got.checkpoint.events_seen == marks);
  REQUIRE(got.evicted.size() == want.evicted.size());
  for (size_t i = 0; i < want.evicted.size(); ++i) {
    const Eviction &a = want.evicted[i], &b = got.evicted[i];
    CHECK((a.machine_id == b.machine_id && a.pod == b.pod && a.reason == b.reason && a.at == b.at &&
           a.quarantined == b.quarantined && a.machine_fault == b.machine_fault && a.incident_id == b.incident_id));
  }
  REQUIRE(got.incidents.size() == want.incidents.size());
  for (size_t i = 0; i < want.incidents.size(); ++i) {
    const size_t named = std::min(want.incidents[i].machines.size(), kMaxStoredIncidentMachines);
    CHECK(got.incidents[i].machines ==
          std::vector<std::string>(want.incidents[i].machines.begin(), want.incidents[i].machines.begin() + named));
  }
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
    INFO(name << ":\n" << table);
    CHECK(json.size() <= kStatusBudget);
    absl::StatusOr<JobStatus> back = JobStatusFromJson(json);
    REQUIRE(back.ok());
    CheckReadsBack(*status, *back);
    CHECK(FirstDifference(JobStatusToJson(*back), json) == "");
  }
  // A controller restarted mid-recovery (its status read back from the API server)
  // decides exactly what the one that kept running does.
  const testing::PlanWorld& w = *s.world;
  absl::StatusOr<JobStatus> restarted = JobStatusFromJson(JobStatusToJson(s.burst));
  REQUIRE(restarted.ok());
  for (int64_t later : {int64_t{0}, 10 * kSecond}) {
    const std::string kept = PlanText(DecideJob(w.job, s.burst, w.obs, w.now + later));
    const std::string resumed = PlanText(DecideJob(w.job, *restarted, w.obs, w.now + later));
    CHECK(FirstDifference(kept, resumed) == "");
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
