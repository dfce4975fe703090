// The job's cordon record (controller/core/cordons.h) and how the status JSON keeps it,
// with the eviction and node-suspicion fields it depends on (status_json.h).
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "controller/core/cordons.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

constexpr int64_t kT = 1'700'000'000'000'000'000;
constexpr int64_t kS = 1'000'000'000;

TEST_CASE("RecordCordon keeps the newest 64 with a count of older ones, once per node and incident", "[unit]") {
  JobStatus st;
  RecordCordon(QuarantineRequest{"node-a", "machine node-a: Xid 79", 3}, false, kT, st);
  RecordCordon(QuarantineRequest{"node-a", "machine node-a: Xid 79", 3}, false, kT + 5, st);  // a repeat
  REQUIRE(st.cordons.size() == 1);
  CHECK(st.cordons[0].node == "node-a");
  CHECK(st.cordons[0].reason == "machine node-a: Xid 79");
  CHECK(st.cordons[0].at == kT);
  CHECK(st.cordons[0].incident_id == 3);
  CHECK(st.cordons[0].by_peregrine);
  // Someone else had cordoned it first: recorded, but never ours to undo.
  RecordCordon(QuarantineRequest{"node-b", "standby failed", 0}, true, kT, st);
  CHECK_FALSE(st.cordons[1].by_peregrine);
  RecordCordon(QuarantineRequest{"", "no machine", 1}, false, kT, st);
  CHECK(st.cordons.size() == 2);
  for (int i = 0; i < 70; ++i) RecordCordon(QuarantineRequest{"n" + std::to_string(i), "r", 10u + i}, false, kT + i, st);
  CHECK(st.cordons.size() == kMaxCordonRecords);
  CHECK(st.cordons_dropped == 72 - kMaxCordonRecords);
  CHECK(st.cordons.back().node == "n69");
  CHECK(st.cordons.front().node == "n" + std::to_string(70 - kMaxCordonRecords));
}

TEST_CASE("The status JSON keeps cordons, evictions' blame and incident, and node suspicions", "[unit]") {
  JobStatus st;
  st.cordons.push_back(CordonRecord{"node-a", "machine node-a (slot 1): inspection xid/PCI:0000:3b:00", kT, 4, true});
  st.cordons.push_back(CordonRecord{"node-b", "standby failed", kT + kS, 0, false});
  st.cordons_dropped = 7;
  Eviction oom{"node-c", "job-m1", "container trainer OOMKilled", kT, false};
  oom.machine_fault = false;
  oom.incident_id = 5;
  st.evicted.push_back(oom);
  SlotStatus slot{0, "job-m0", "node-d", true};
  slot.node_unready_since = kT;
  slot.node_unready_step = 40;
  slot.node_unready_progress_at = kT + 10 * kS;
  st.slots.push_back(slot);
  st.standbys.push_back(StandbyStatus{"job-s0", "node-e", true, kT + 2 * kS});
  const std::string text = JobStatusToJson(st);
  const nlohmann::json j = nlohmann::json::parse(text);
  CHECK(j["cordons"][0]["node"] == "node-a");
  CHECK(j["cordons"][0]["incidentId"] == 4);
  CHECK(j["cordons"][1]["byPeregrine"] == false);
  CHECK(j["cordonsDropped"] == 7);
  CHECK(j["evictedMachines"][0]["machineFault"] == false);
  absl::StatusOr<JobStatus> back = JobStatusFromJson(text);
  REQUIRE(back.ok());
  REQUIRE(back->cordons.size() == 2);
  CHECK(back->cordons[0].reason == st.cordons[0].reason);
  CHECK(back->cordons[0].at == kT);
  CHECK(back->cordons[0].incident_id == 4);
  CHECK(back->cordons[0].by_peregrine);
  CHECK_FALSE(back->cordons[1].by_peregrine);
  CHECK(back->cordons_dropped == 7);
  REQUIRE(back->evicted.size() == 1);
  CHECK_FALSE(back->evicted[0].machine_fault);
  CHECK(back->evicted[0].incident_id == 5);
  CHECK(back->slots[0].node_unready_since == kT);
  CHECK(back->slots[0].node_unready_step == 40);
  CHECK(back->slots[0].node_unready_progress_at == kT + 10 * kS);
  CHECK(back->standbys[0].node_unready_since == kT + 2 * kS);
  CHECK(JobStatusToJson(*back) == text);

  // A status written before these fields: every eviction blamed its machine, no cordons.
  nlohmann::json old = j;
  old["evictedMachines"][0].erase("machineFault");
  old.erase("cordons");
  old.erase("cordonsDropped");
  back = JobStatusFromJson(old.dump());
  REQUIRE(back.ok());
  CHECK(back->evicted[0].machine_fault);
  CHECK(back->cordons.empty());

  nlohmann::json bad = j;
  bad["cordons"][0]["node"] = "";
  CHECK_THAT(std::string(JobStatusFromJson(bad.dump()).status().message()), Catch::Contains("cordons[].node"));
  bad["cordons"][0]["incidentId"] = -1;
  bad["cordons"][0]["node"] = "n";
  CHECK_THAT(std::string(JobStatusFromJson(bad.dump()).status().message()), Catch::Contains("incidentId"));
}

}  // namespace
}  // namespace peregrine
