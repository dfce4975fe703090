#include "agent/inspection/inspector.h"

#include <deque>

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// A scripted inspection: returns the queued statuses for one component, one per run, and
// counts its runs. (The real inspections are tested on their own; this isolates the
// scheduling and alarm rules.)
class ScriptedInspection : public Inspection {
 public:
  ScriptedInspection(std::string kind, std::deque<std::pair<InspectionOutcome, bool>> script,
                     int* runs)
      : kind_(std::move(kind)), script_(std::move(script)), runs_(runs) {}
  std::string kind() const override { return kind_; }
  std::vector<InspectionResult> Run(absl::Time now) override {
    ++*runs_;
    InspectionResult r;
    r.kind = kind_;
    r.component = "c0";
    r.observed_at = now;
    if (!script_.empty()) {
      r.status = script_.front().first;
      r.machine_attributed = script_.front().second;
      script_.pop_front();
    }
    return {r};
  }

 private:
  std::string kind_;
  std::deque<std::pair<InspectionOutcome, bool>> script_;
  int* runs_;
};

using S = InspectionOutcome;

TEST_CASE("inspector: each inspection runs at its own interval", "[unit]") {
  int fast_runs = 0, slow_runs = 0;
  Inspector inspector;
  inspector.Add(std::make_unique<ScriptedInspection>("fast", std::deque<std::pair<S, bool>>{}, &fast_runs),
                {absl::Seconds(5), 1});
  inspector.Add(std::make_unique<ScriptedInspection>("slow", std::deque<std::pair<S, bool>>{}, &slow_runs),
                {absl::Seconds(30), 1});
  CHECK(inspector.NextDue() == absl::InfinitePast());
  for (int s = 0; s <= 60; ++s) inspector.Poll(kT0 + absl::Seconds(s));
  CHECK(fast_runs == 13);  // 0, 5, ..., 60
  CHECK(slow_runs == 3);   // 0, 30, 60
  CHECK(inspector.NextDue() == kT0 + absl::Seconds(65));
  CHECK(inspector.Latest().size() == 2);
}

TEST_CASE("inspector: trigger threshold, escalation and re-arming", "[unit]") {
  int runs = 0;
  Inspector inspector;
  inspector.Add(std::make_unique<ScriptedInspection>(
                    "network",
                    std::deque<std::pair<S, bool>>{{S::kWarning, false},
                                                   {S::kOk, false},
                                                   {S::kWarning, false},
                                                   {S::kWarning, false},  // 2nd in a row: alarm
                                                   {S::kWarning, false},  // no repeat
                                                   {S::kFault, false},    // escalation: alarm
                                                   {S::kError, false},    // ignored
                                                   {S::kFault, false},    // no repeat
                                                   {S::kOk, false},
                                                   {S::kWarning, false},
                                                   {S::kWarning, false}},  // re-armed: alarm
                    &runs),
                {absl::Seconds(1), 2});
  std::vector<int> alarm_polls;
  std::vector<S> alarm_status;
  for (int s = 0; s < 11; ++s) {
    InspectorPoll p = inspector.Poll(kT0 + absl::Seconds(s));
    REQUIRE(p.results.size() == 1);
    for (const auto& a : p.alarms) {
      alarm_polls.push_back(s);
      alarm_status.push_back(a.status);
    }
  }
  CHECK(alarm_polls == std::vector<int>{3, 5, 10});
  CHECK(alarm_status == std::vector<S>{S::kWarning, S::kFault, S::kWarning});
}

TEST_CASE("inspector: a machine-attributed fault alarms at once", "[unit]") {
  int runs = 0;
  Inspector inspector;
  inspector.Add(std::make_unique<ScriptedInspection>(
                    "gpu", std::deque<std::pair<S, bool>>{{S::kFault, true}, {S::kFault, true}}, &runs),
                {absl::Seconds(1), 3});
  InspectorPoll p = inspector.Poll(kT0);
  REQUIRE(p.alarms.size() == 1);
  CHECK(p.alarms[0].machine_attributed);
  CHECK(inspector.Poll(kT0 + absl::Seconds(1)).alarms.empty());
  // NOT_PRESENT never alarms.
  Inspector quiet;
  quiet.Add(std::make_unique<ScriptedInspection>(
                "rdma", std::deque<std::pair<S, bool>>{{S::kNotPresent, false}}, &runs),
            {absl::Seconds(1), 1});
  CHECK(quiet.Poll(kT0).alarms.empty());
}

}  // namespace
}  // namespace peregrine
