// The TrainingJob status stays small when a whole large job fails at once: per-rank lists
// in the decision core (list_summary.h) and free text in the status JSON become bounded
// summaries (the first entries named, "and K more (N in all)").
#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/str_cat.h"
#include "controller/core/decision_engine.h"
#include "controller/core/list_summary.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr size_t kStatusBudget = 512 * 1024;

TEST_CASE("The status stays under 512 KiB when 100000 ranks crash at once and still names the first ranks and the count", "[unit]") {
  // 3,125 machines x 32 GPUs: 100,000 ranks (the per-machine slot list is state and stays).
  constexpr int kMachines = 3'125, kGpus = 32;
  testing::PlanWorld w(testing::TrainJob(kMachines, kGpus, kGpus));
  w.Step();
  w.Step();
  REQUIRE(w.status.attempt == 1);
  w.Progress(10);
  w.Step();
  for (const SlotStatus& slot : w.status.slots) {
    AgentObservation* a = w.Agent(slot.pod);
    REQUIRE(a != nullptr);
    a->phase = AgentTrainingPhase::kExited;
    for (int local = 0; local < kGpus; ++local) {
      a->exits.push_back(RankExit{slot.index * kGpus + local, 1, 0, {"RuntimeError: CUDA error: an illegal memory access"}});
    }
  }
  w.now += kSecond;
  w.Step();
  REQUIRE_FALSE(w.status.incidents.empty());
  std::string json = JobStatusToJson(w.status);
  INFO("status after detection: " << json.size() << " bytes");
  CHECK(json.size() <= kStatusBudget);
  w.now += 5 * kSecond;  // past the triage window: the incident is decided
  w.Step();
  json = JobStatusToJson(w.status);
  INFO("status after the decision: " << json.size() << " bytes");
  CHECK(json.size() <= kStatusBudget);
  const Incident& inc = w.status.incidents.back();
  CHECK(inc.signal.find("pod j-m0: rank 0 exited with code 1") != std::string::npos);
  CHECK(inc.signal.find("more (100000 in all)") != std::string::npos);
  // The state still reads back.
  CHECK(JobStatusFromJson(json).ok());
}

TEST_CASE("SummarizeList names the first entries and counts the rest", "[unit]") {
  CHECK(SummarizeList({}) == "");
  CHECK(SummarizeList({"a", "b"}, 2) == "a; b");
  CHECK(SummarizeList({"a", "b", "c", "d"}, 2) == "a; b; and 2 more (4 in all)");
  CHECK(SummarizeList({"a", "b"}, 0) == "and 2 more (2 in all)");
  const std::string long_entry(kMaxSummaryEntryBytes + 100, 'x');
  const std::string cut = SummarizeList({long_entry});
  CHECK(cut.size() == kMaxSummaryEntryBytes + 3);
  CHECK(cut.substr(cut.size() - 3) == "...");
}

TEST_CASE("Status JSON cuts oversized text and text lists with a visible marker and reads back", "[unit]") {
  JobStatus st;
  Incident inc;
  inc.id = 1;
  inc.kind = IncidentKind::kProcessCrash;
  inc.signal = std::string(2 * 1024 * 1024, 's');
  inc.decision = std::string(100'000, 'd');
  for (int i = 0; i < 20'000; ++i) inc.actions.push_back(absl::StrCat("evict machine m", i));
  st.incidents.push_back(inc);
  Eviction ev;
  ev.machine_id = "m0";
  ev.pod = "p0";
  ev.reason = std::string(1'000'000, 'r');
  ev.at = 1;
  st.evicted.push_back(ev);
  st.conditions.push_back(Condition{"Ready", ConditionStatus::kFalse, "Recovering", std::string(1'000'000, 'm'), 0, 1});
  const std::string json = JobStatusToJson(st);
  CHECK(json.size() <= 64 * 1024);
  CHECK(json.find("... truncated ") != std::string::npos);
  CHECK(json.find("more (20000 in all)") != std::string::npos);
  absl::StatusOr<JobStatus> back = JobStatusFromJson(json);
  REQUIRE(back.ok());
  REQUIRE(back->incidents.size() == 1);
  CHECK(back->incidents[0].actions.front() == "evict machine m0");
  CHECK(back->incidents[0].signal.find("... truncated ") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
