// ScenarioByName: the steps each named scenario of the local mode's driver makes, for a
// demo-sized job (4 machines) and for the smallest jobs (the slots fall back).
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/local/scenario.h"

namespace peregrine {
namespace {

const char* TriggerName(ScenarioStep::Trigger trigger) {
  switch (trigger) {
    case ScenarioStep::Trigger::kAtStep: return "at-step";
    case ScenarioStep::Trigger::kIncidentOpened: return "incident-opened";
    case ScenarioStep::Trigger::kNetworkAlarmEnded: return "network-alarm-ended";
  }
  return "?";
}

// "trigger: kind slot/local_rank [xfactor] [~fraction] [->peer +delay_us] [xid N]; ..." per step,
// then "@at_step".
std::string Describe(const Scenario& s) {
  std::vector<std::string> steps;
  for (const ScenarioStep& step : s.steps) {
    std::vector<std::string> faults;
    for (const FaultRequest& f : step.faults) {
      std::string d = absl::StrCat(f.kind, " ", f.slot, "/", f.local_rank);
      if (f.factor != 1.0) absl::StrAppend(&d, " x", f.factor);
      if (f.fraction != 0) absl::StrAppend(&d, " ~", f.fraction);
      if (f.peer_slot >= 0 || f.delay_us != 0) absl::StrAppend(&d, " ->", f.peer_slot, " +", f.delay_us);
      if (f.xid != 79) absl::StrAppend(&d, " xid ", f.xid);
      if (!f.machine.empty() || !f.peer_machine.empty() || f.bandwidth_bytes_per_second != 0) {
        absl::StrAppend(&d, " (unexpected fields)");
      }
      faults.push_back(d);
    }
    std::string line = absl::StrCat(TriggerName(step.trigger), ": ", absl::StrJoin(faults, ", "));
    if (step.code_update) {
      absl::StrAppend(&line, "update ", step.code_update->revision, step.code_update->urgent ? " urgent " : " ",
                      absl::StrJoin(step.code_update->command.value_or(std::vector<std::string>{}), " "));
    }
    steps.push_back(line);
  }
  return absl::StrCat(absl::StrJoin(steps, "; "), " @", s.at_step);
}

TEST_CASE("ScenarioByName: the steps of every named scenario", "[unit]") {
  struct Case {
    std::string name;
    int machines;
    std::string want;
  };
  Scenario defaults;
  const std::string at = absl::StrCat(" @", defaults.at_step);
  const std::vector<Case> cases = {
      {"kill-machine", 4, "at-step: kill 2/-1" + at},
      {"kill-machine", 2, "at-step: kill 1/-1" + at},
      {"failslow-slow-rank", 4, "at-step: slow 1/0 x3 @60"},
      {"failslow-slow-rank", 1, "at-step: slow 0/0 x3 @60"},
      {"failslow-congested-link", 4, "at-step: link 0/-1 ->1 +20000 @60"},
      {"failslow-congested-link", 1, "at-step: link 0/-1 ->0 +20000 @60"},
      {"failslow-rank-and-link", 4, "at-step: slow 2/1 x3, link 0/-1 ->1 +20000 @60"},
      {"failslow-rank-and-link", 2, "at-step: slow 0/1 x3, link 0/-1 ->1 +20000 @60"},
      {"failslow-two-slow-ranks", 4, "at-step: slow 1/1 x3, slow 2/0 x3 @60"},
      {"failslow-two-slow-ranks", 2, "at-step: slow 1/1 x3, slow 0/0 x3 @60"},
      {"failslow-jitter", 3, "at-step: jitter 0/-1 ~0.05, jitter 1/-1 ~0.05, jitter 2/-1 ~0.05 @10"},
      {"xid", 4, "at-step: xid 1/0" + at},
      {"nic-flap", 4, "at-step: nic-flap 2/-1" + at},
      {"nic-flap-twice", 2, "at-step: nic-flap 1/-1; network-alarm-ended: nic-flap 1/-1" + at},
      {"hang-pp-stage", 4, "at-step: hang 2/-1" + at},
      {"crash", 4, "at-step: crash 1/0" + at},
      {"crash-once", 1, "at-step: crash 0/0; incident-opened: clear 0/0" + at},
      {"nan", 4, "at-step: nan 1/-1" + at},
      {"sdc", 1, "at-step: sdc 0/-1" + at},
  };
  for (const Case& c : cases) {
    INFO(c.name << " on " << c.machines << " machines");
    TrainingJob job;
    job.spec.machines = c.machines;
    absl::StatusOr<Scenario> s = ScenarioByName(c.name, job);
    REQUIRE(s.ok());
    CHECK(s->name == c.name);
    CHECK(Describe(*s) == c.want);
  }
}

TEST_CASE("ScenarioByName: code-update-rollback breaks the job's own command, unknown names are refused",
          "[unit]") {
  TrainingJob job;
  job.spec.machines = 2;
  job.spec.code.revision = "v7";
  job.spec.code.command = {"sim-trainer", "--steps", "10"};
  absl::StatusOr<Scenario> s = ScenarioByName("code-update-rollback", job);
  REQUIRE(s.ok());
  CHECK(Describe(*s) == absl::StrCat("at-step: update v7-broken urgent sim-trainer --steps 10 --no-such-flag @",
                                     Scenario().at_step));

  absl::StatusOr<Scenario> unknown = ScenarioByName("meteor", job);
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(unknown.status().message()) ==
        absl::StrCat("--scenario: unknown scenario 'meteor' (known: ", ScenarioNames(), ")"));
}

}  // namespace
}  // namespace peregrine
