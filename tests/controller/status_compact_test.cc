// The compact forms of the stored status (controller/status_compact.h): exact round
// trips, statuses older controllers wrote, and malformed or hostile text refused with the
// field and the entry named.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "controller/status_compact.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

using nlohmann::json;

std::string Error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::vector<SlotStatus> Slots(int n) {
  std::vector<SlotStatus> slots;
  for (int i = 0; i < n; ++i) {
    slots.push_back(SlotStatus{i, absl::StrCat("job-m", i, i % 7 == 3 ? "-12" : ""),
                               i % 5 == 4 ? "" : absl::StrCat("pool-", i % 3, "-abc-", (i * 7919) % 1000), i % 2 == 0});
  }
  slots[5].node_unready_since = 1'795'000'000'123'456'000;
  slots[5].node_unready_step = 40;
  slots[5].node_unready_progress_at = 1'795'000'000'000'000'000;
  return slots;
}

bool SameSlots(const std::vector<SlotStatus>& a, const std::vector<SlotStatus>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].index != b[i].index || a[i].pod != b[i].pod || a[i].machine_id != b[i].machine_id ||
        a[i].observed != b[i].observed || a[i].node_unready_since != b[i].node_unready_since ||
        a[i].node_unready_step != b[i].node_unready_step ||
        a[i].node_unready_progress_at != b[i].node_unready_progress_at) {
      return false;
    }
  }
  return true;
}

TEST_CASE("Front coding and prefix coding give back every name exactly", "[unit]") {
  const std::vector<std::string> names = {"llm-m0", "llm-m1", "llm-m10", "", "llm-m1-7", "other", "o"};
  CHECK(FrontCode(names) == "0:llm-m0 5:1 6:0 0: 0:llm-m1-7 0:other 1:");
  CHECK(FrontDecode(FrontCode(names), names.size(), "f") == names);
  std::vector<std::string> prefixes;
  const std::string coded = PrefixCode(names, &prefixes);
  CHECK(prefixes == std::vector<std::string>{"llm-", "", "llm-m1-"});
  CHECK(PrefixDecode(coded, prefixes, names.size(), "p") == names);
  CHECK(FrontDecode("", 0, "f").empty());
  CHECK(FrontCodable({"node-1", "a.b_c"}));
  CHECK_FALSE(FrontCodable({"has space"}));
  CHECK_FALSE(FrontCodable({"caf\xc3\xa9"}));
}

TEST_CASE("Front and prefix decoding refuse malformed text naming the field and the entry", "[unit]") {
  CHECK(Error([] { FrontDecode("0:a 3:b", 2, "machineTable.pods"); }) ==
        "machineTable.pods: entry 1: shares 3 bytes with a previous name of 1");
  CHECK(Error([] { FrontDecode("0:a b", 2, "f"); }) == "f: entry 1: no ':' in 'b'");
  CHECK(Error([] { FrontDecode("0:a x1:b", 2, "f"); }) == "f: entry 1: 'x1' is not a non-negative integer");
  CHECK(Error([] { FrontDecode("0:a", 2, "f"); }) == "f: 1 entries, the count says 2");
  CHECK(Error([] { FrontDecode("0:a 1:b 1:c", 2, "f"); }) == "f: more than the 2 entries the count says");
  CHECK(Error([] { FrontDecode("0:a", 0, "f"); }) == "f: entries present but the count is 0");
  CHECK_THAT(Error([] { FrontDecode("0:a", 2'000'000'000, "f"); }), Catch::Contains("the count says 2000000000"));
  CHECK(Error([] { PrefixDecode("0:a 2:b", {"x-", "y-"}, 2, "machineTable.machineIds"); }) ==
        "machineTable.machineIds: entry 1: prefix 2 of 2");
}

TEST_CASE("machineTable keeps every slot's pod, machine, observed flag and unready node exactly", "[unit]") {
  const std::vector<SlotStatus> slots = Slots(300);
  REQUIRE(MachineTableFits(slots));
  const json table = MachineTableToJson(slots);
  CHECK(table["nodeUnready"].size() == 1);
  CHECK(SameSlots(MachineTableFromJson(json::parse(table.dump())), slots));
  const json summary = MachineSummaryToJson(slots);
  CHECK(summary["total"] == 300);
  CHECK(summary["observed"] == 150);
  CHECK(summary["replaced"] == 43);  // i % 7 == 3
  CHECK(summary["nodeUnready"] == 1);

  std::vector<SlotStatus> shuffled = slots;
  std::swap(shuffled[0], shuffled[1]);
  CHECK_FALSE(MachineTableFits(shuffled));  // slot i must have index i
  std::vector<SlotStatus> spaced = slots;
  spaced[2].machine_id = "a node";
  CHECK_FALSE(MachineTableFits(spaced));

  json bad = table;
  bad["observed"] = std::string(299, '1');
  CHECK(Error([&] { MachineTableFromJson(bad); }) == "machineTable.observed: expected 300 characters 0 or 1");
  bad = table;
  bad["nodeUnready"][0]["index"] = 300;
  CHECK(Error([&] { MachineTableFromJson(bad); }) == "machineTable.nodeUnready[]: index 300 is not a slot of 300");
  bad = table;
  bad.erase("machinePrefixes");
  CHECK(Error([&] { MachineTableFromJson(bad); }) == "machineTable: machinePrefixes: expected an array of strings");
  bad = table;
  bad["count"] = -1;
  CHECK(Error([&] { MachineTableFromJson(bad); }) == "machineTable: count: negative");
  bad = table;
  bad["pods"] = 5;
  CHECK(Error([&] { MachineTableFromJson(bad); }) == "machineTable: pods: expected a string");
}

TEST_CASE("placementRuns keep an irregular placement exactly and refuse hostile counts", "[unit]") {
  std::vector<CheckpointSlotPlacement> placement;
  for (int i = 0; i < 100; ++i) placement.push_back({i, {(i + 8) % 100, (i + 16) % 100}});
  placement[40].holders = {3};
  placement.push_back({200, {}});
  const json runs = PlacementRunsToJson(placement);
  CHECK(runs.size() == 6);  // 0-39, 40, 41-83, 84-91 and 92-99 (the wraps), 200
  CHECK(PlacementRunsFromJson(json::parse(runs.dump()), kMaxPlacementSlots) == placement);
  CHECK_THAT(Error([] { PlacementRunsFromJson(json::parse(R"([{"slot":0,"count":0,"offsets":[]}])"), 10); }),
             Catch::Contains("checkpoint.placementRuns[]: count 0 at slot 0"));
  CHECK_THAT(Error([] { PlacementRunsFromJson(json::parse(R"([{"slot":0,"count":2000000000,"offsets":[1]}])"), 10); }),
             Catch::Contains("the placement has at most 10 slots"));
  CHECK_THAT(Error([] { PlacementRunsFromJson(json::parse(R"([{"slot":0,"count":1,"offsets":["x"]}])"), 10); }),
             Catch::Contains("offsets: expected an array of integers"));
}

TEST_CASE("Checkpoint event marks by slot keep every nanosecond, other pods' marks, and drop only zeros", "[unit]") {
  const std::vector<SlotStatus> slots = Slots(70);
  std::map<std::string, int64_t> seen;
  for (int i = 0; i < 70; i += 3) seen[slots[i].pod] = 1'795'000'000'000'000'000 + i * 1'234'567;
  seen[slots[1].pod] = 0;
  seen[slots[2].pod] = std::numeric_limits<int64_t>::max();
  seen[slots[4].pod] = std::numeric_limits<int64_t>::min();
  seen["job-m9-old"] = 7;
  json cp = json::object();
  EventsSeenToJson(seen, slots, &cp);
  CHECK(cp["eventsSeen"] == json{{"job-m9-old", 7}});
  std::map<std::string, int64_t> want = seen;
  want.erase(slots[1].pod);
  CHECK(EventsSeenFromJson(json::parse(cp.dump()), slots) == want);

  json bad = cp;
  bad["eventsSeenBySlot"] = cp["eventsSeenBySlot"].get<std::string>() + " -";
  CHECK(Error([&] { EventsSeenFromJson(bad, slots); }) == "checkpoint.eventsSeenBySlot: more entries than the 70 slots");
  bad["eventsSeenBySlot"] = "- -";
  CHECK(Error([&] { EventsSeenFromJson(bad, slots); }) == "checkpoint.eventsSeenBySlot: 2 entries for 70 slots");
  std::string by_slot = cp["eventsSeenBySlot"];
  bad["eventsSeenBySlot"] = "Z" + by_slot.substr(by_slot.find(' '));
  CHECK(Error([&] { EventsSeenFromJson(bad, slots); }) == "checkpoint.eventsSeenBySlot: entry 0: 'Z' is not a base-36 offset");
  bad["eventsSeenBySlot"] = "zzzzzzzzzzzzz" + by_slot.substr(by_slot.find(' '));
  CHECK(Error([&] { EventsSeenFromJson(bad, slots); }) == "checkpoint.eventsSeenBySlot: entry 0: 'zzzzzzzzzzzzz' is out of range");
  bad["eventsSeenBase"] = std::numeric_limits<int64_t>::max();
  bad["eventsSeenBySlot"] = "1" + by_slot.substr(by_slot.find(' '));
  CHECK(Error([&] { EventsSeenFromJson(bad, slots); }) == "checkpoint.eventsSeenBySlot: entry 0: out of range");
}

TEST_CASE("A status an older controller wrote (machines listed, placement, eventsSeen) still reads and is rewritten compactly", "[unit]") {
  json old = {{"phase", "Running"}, {"attempt", 1}};
  json machines = json::array();
  json placement = json::array();
  json seen = json::object();
  for (int i = 0; i < 80; ++i) {
    machines.push_back({{"index", i}, {"pod", absl::StrCat("llm-m", i)}, {"machineId", absl::StrCat("node-", i)},
                        {"observed", true}});
    placement.push_back({{"slot", i}, {"holders", {(i + 1) % 80}}});
    seen[absl::StrCat("llm-m", i)] = i == 3 ? 0 : 1'795'000'000'000'000'000 + i;
  }
  old["machines"] = machines;
  old["checkpoint"] = {{"placement", placement}, {"eventsSeen", seen}};
  old["incidents"] = json::array({{{"id", 1}, {"kind", "MachineLost"}, {"signal", "node-7 gone"},
                                   {"machines", {"node-7"}}}});
  old["evictedMachines"] = json::array({{{"machineId", "node-7"}, {"reason", "node-7 gone"}, {"incidentId", 1}}});
  absl::StatusOr<JobStatus> s = JobStatusFromJson(old.dump());
  REQUIRE(s.ok());
  REQUIRE(s->slots.size() == 80);
  CHECK(s->slots[79].machine_id == "node-79");
  REQUIRE(s->checkpoint.placement.size() == 80);
  CHECK(s->checkpoint.placement[79].holders == std::vector<int>{0});
  CHECK(s->checkpoint.events_seen.size() == 79);
  CHECK(s->checkpoint.events_seen.at("llm-m5") == 1'795'000'000'000'000'005);
  const json now = json::parse(JobStatusToJson(*s));
  CHECK_FALSE(now.contains("machines"));
  CHECK(now["machineTable"]["count"] == 80);
  CHECK(now["checkpoint"]["placementRuns"].size() == 2);
  CHECK(now["evictedMachines"][0]["reasonIsIncidentSignal"] == true);
  absl::StatusOr<JobStatus> again = JobStatusFromJson(now.dump());
  REQUIRE(again.ok());
  CHECK(SameSlots(again->slots, s->slots));
  CHECK(again->checkpoint.placement == s->checkpoint.placement);
  CHECK(again->checkpoint.events_seen == s->checkpoint.events_seen);
  CHECK(again->evicted[0].reason == "node-7 gone");
  // The full form (the controller's HTTP API) lists every machine.
  CHECK(json::parse(JobStatusToJson(*s, -1, StatusForm::kFull))["machines"].size() == 80);
}

TEST_CASE("An incident names its first 64 machines with the count, and inconsistent counts and references are refused", "[unit]") {
  JobStatus s;
  Incident inc;
  inc.id = 4;
  inc.signal = "lost";
  for (int i = 0; i < 100; ++i) inc.machines.push_back(absl::StrCat("node-", i));
  s.incidents.push_back(inc);
  const std::string text = JobStatusToJson(s);
  absl::StatusOr<JobStatus> back = JobStatusFromJson(text);
  REQUIRE(back.ok());
  CHECK(back->incidents[0].machines.size() == kMaxStoredIncidentMachines);
  CHECK(back->incidents[0].machines_not_named == 36);
  CHECK(JobStatusToJson(*back) == text);
  CHECK(json::parse(JobStatusToJson(s, -1, StatusForm::kFull))["incidents"][0]["machines"].size() == 100);

  json bad = json::parse(text);
  bad["incidents"][0]["machinesCount"] = 3;
  CHECK_THAT(std::string(JobStatusFromJson(bad.dump()).status().message()),
             Catch::Contains("incidents[].machinesCount: 3 is less than the 64 machines named"));
  bad = json::parse(text);
  bad["evictedMachines"] = json::array({{{"machineId", "node-1"}, {"reasonIsIncidentSignal", true}, {"incidentId", 9}}});
  CHECK_THAT(std::string(JobStatusFromJson(bad.dump()).status().message()),
             Catch::Contains("evictedMachines[].reasonIsIncidentSignal: incident 9 is not in incidents"));
}

}  // namespace
}  // namespace peregrine
