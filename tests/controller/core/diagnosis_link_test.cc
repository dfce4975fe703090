// A lost agent link during a stop-time diagnosis is no verdict on the machine: an agent
// silent past the heartbeat timeout (a half-open stream) or whose command was lost with a
// dropped stream is excluded as "inconclusive: agent link lost", while a live agent that
// keeps heartbeating and holds the command unanswered still fails its machine. Simulated
// time; the registry is modelled by the agents' pending ids and results. Through the
// decision engine (decide_diagnosis.cc): a machine really lost during the diagnosis (its
// node unready with the agent silent) is evicted, a pod lost for a cause not its
// machine's (OOMKilled) is replaced without a quarantine, a half-open agent evicts nothing.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/core/decision_engine.h"
#include "controller/core/stop_time_diagnosis.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// Four machines; each Advance heartbeats the live agents, "sends" the commands (pending on
// the agent, as AgentRegistry::Send records them) and lets the answering agents answer.
struct LinkHarness {
  std::vector<AgentObservation> agents{4};
  DiagnosisContext ctx;
  StopTimeDiagnosis st;
  std::vector<DiagnosisStageRecord> records;
  std::set<std::string> silent;  // no heartbeat, no answer: a half-open stream
  std::set<std::string> mute;    // heartbeats, but its diagnostics never answer

  LinkHarness() {
    ctx.id_prefix = "default/demo/incident-1";
    ctx.gpus_per_machine = 2;
    ctx.parallelism.tensor = 2;
    ctx.parallelism.pipeline = 2;
    ctx.parallelism.data = 2;
    ctx.heartbeat_timeout_ns = 30 * kSecond;
    ctx.now = 1'000 * kSecond;
    for (int i = 0; i < 4; ++i) {
      agents[i].pod = absl::StrCat("demo-m", i);
      agents[i].machine_id = absl::StrCat("machine-", 10 + i);
      agents[i].connected = true;
      agents[i].last_seen = ctx.now;
      ctx.machines.push_back(DiagnosisMachine{i, agents[i].pod, agents[i].machine_id, "127.0.0.1", &agents[i]});
    }
    st = BeginStopTimeDiagnosis(1, /*numeric=*/false, 41000, ctx.now);
  }

  AgentObservation& Of(const std::string& pod) {
    for (AgentObservation& a : agents) {
      if (a.pod == pod) return a;
    }
    FAIL("no agent " << pod);
    return agents[0];
  }

  DiagnosisAdvance Advance() {
    for (AgentObservation& a : agents) {
      if (!silent.count(a.pod)) a.last_seen = ctx.now;
    }
    DiagnosisAdvance adv = AdvanceStopTimeDiagnosis(ctx, &st, &records);
    for (const CommandToSend& c : adv.commands) Of(c.pod).pending_command_ids.push_back(c.id);
    // Every agent whose link works answers what it holds (the registry re-sends pending
    // commands to a stream that came back).
    for (AgentObservation& a : agents) {
      if (silent.count(a.pod)) continue;
      std::vector<std::string> still;
      for (const std::string& id : a.pending_command_ids) {
        const bool diagnostic = id.find("/stop/") == std::string::npos;
        if (mute.count(a.pod) && diagnostic) {
          still.push_back(id);
          continue;
        }
        CommandResultObservation r;
        r.command_id = id;
        r.ok = true;
        if (diagnostic) {
          DiagnosticOutcome d;
          d.passed = true;
          r.diagnostic = d;
        }
        a.command_results[id] = r;
      }
      a.pending_command_ids = still;
    }
    return adv;
  }

  // Runs the stop stage and sends the eud stage's commands; returns its deadline.
  int64_t StartEud(const std::set<std::string>& silent_from_eud = {}) {
    REQUIRE_FALSE(Advance().finished);  // stop sent and answered
    silent = silent_from_eud;
    ctx.now += kSecond;
    REQUIRE_FALSE(Advance().finished);  // stop judged, eud sent
    REQUIRE(st.stage == StopTimeStage::kEud);
    return st.stage_started_at + 120 * kSecond + kAnswerMarginNs;
  }

  std::string EudId(const std::string& pod) const {
    return DiagnosisCommandId(ctx.id_prefix, StopTimeStage::kEud, 0, pod);
  }

  // Advances (everyone answering from now on) until the diagnosis finishes.
  DiagnosisAdvance Finish() {
    silent.clear();
    mute.clear();
    for (int i = 0; i < 32; ++i) {
      DiagnosisAdvance adv = Advance();
      if (adv.finished) return adv;
      ctx.now += kSecond;
    }
    FAIL("diagnosis did not finish");
    return {};
  }

  const DiagnosisStageRecord* Eud() const {
    for (const DiagnosisStageRecord& r : records) {
      if (r.stage == StopTimeStage::kEud) return &r;
    }
    return nullptr;
  }

  bool EudLine(const std::string& text) const {
    const DiagnosisStageRecord* eud = Eud();
    if (eud == nullptr) return false;
    for (const std::string& line : eud->results) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_CASE("stop-time diagnosis: a half-open stream (agent silent past the heartbeat timeout) is no machine verdict", "[unit]") {
  LinkHarness h;
  // From the eud stage on, m2's stream looks connected but nothing arrives any more.
  const int64_t deadline = h.StartEud({"demo-m2"});
  h.ctx.now = deadline - kSecond;
  DiagnosisAdvance before = h.Advance();
  CHECK_FALSE(before.finished);
  CHECK(before.requeue_after_ns == kSecond);
  h.ctx.now = deadline;
  DiagnosisAdvance at = h.Advance();
  CHECK_FALSE(at.finished);
  CHECK(at.failed_slots.empty());
  REQUIRE(h.Eud() != nullptr);
  CHECK(h.Eud()->verdict == StageVerdict::kPassed);
  CHECK(h.Eud()->failed_machines.empty());
  CHECK(h.EudLine("machine-12: inconclusive: agent link lost (silent for"));
  CHECK(h.st.stage == StopTimeStage::kAllToAll);  // the diagnosis goes on without that answer
  const DiagnosisAdvance done = h.Finish();
  CHECK(done.finished);
  CHECK(done.failed_slots.empty());
}

TEST_CASE("stop-time diagnosis: a command lost with a dropped and re-registered stream is no machine verdict", "[unit]") {
  LinkHarness h;
  h.mute.insert("demo-m1");
  const int64_t deadline = h.StartEud();
  AgentObservation& m1 = h.Of("demo-m1");
  REQUIRE(m1.pending_command_ids == std::vector<std::string>{h.EudId("demo-m1")});
  // The stream drops and the agent registers again reporting the command executed: the
  // registry forgets it and the result that was in flight is gone. The agent heartbeats on.
  m1.pending_command_ids.clear();
  h.ctx.now = deadline;
  DiagnosisAdvance at = h.Advance();
  CHECK(at.failed_slots.empty());
  REQUIRE(h.Eud() != nullptr);
  CHECK(h.Eud()->verdict == StageVerdict::kPassed);
  CHECK(h.EudLine("machine-11: inconclusive: agent link lost (the command and its answer were lost"));
  const DiagnosisAdvance done = h.Finish();
  CHECK(done.failed_slots.empty());
}

TEST_CASE("stop-time diagnosis: a live agent that heartbeats and holds the command unanswered fails its machine", "[unit]") {
  LinkHarness h;
  h.mute.insert("demo-m3");
  const int64_t deadline = h.StartEud();
  h.ctx.now = deadline - kSecond;
  CHECK_FALSE(h.Advance().finished);
  h.ctx.now = deadline;
  DiagnosisAdvance at = h.Advance();
  CHECK(at.finished);
  CHECK(at.failed_slots == std::vector<int>{3});
  CHECK(h.EudLine("machine-13: no answer before the deadline"));
}

TEST_CASE("stop-time diagnosis: an agent silent just within the heartbeat timeout still answers for its machine", "[unit]") {
  LinkHarness h;
  h.mute.insert("demo-m0");
  const int64_t deadline = h.StartEud();
  // Its last heartbeat exactly one timeout ago: not yet silent past it.
  h.ctx.now = deadline;
  h.silent.insert("demo-m0");
  h.Of("demo-m0").last_seen = deadline - 30 * kSecond;
  DiagnosisAdvance at = h.Advance();
  CHECK(at.failed_slots == std::vector<int>{0});
}

// The decision engine with stand-in diagnostics: every connected agent not in `silent`
// heartbeats each round and passes every diagnostic at once; a silent one neither
// heartbeats nor answers (its commands stay pending, as on a half-open stream).
struct DiagnosisWorld : testing::PlanWorld {
  DiagnosisWorld() : PlanWorld(testing::DemoJob()) {
    Step();
    Step();
    Progress(20);
    now += kSecond;
    Step();
    REQUIRE(status.attempt == 1);
  }
  std::set<std::string> silent;  // machine ids

  JobPlan Round(int64_t advance) {
    now += advance;
    for (AgentObservation& a : obs.agents) {
      if (a.connected && !silent.count(a.machine_id)) a.last_seen = now;
    }
    return Step();
  }
  // A rank of slot 0 crashes with no culprit; the triage ends in a stop-time diagnosis.
  void StartDiagnosis() {
    AgentObservation* a = Agent(status.slots[0].pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{0, 1, 0, {"Segmentation fault (core dumped)"}}};
    Round(0);
    Round(2 * kSecond);
    REQUIRE(status.diagnosis.has_value());
  }
  bool OnCommand(const CommandToSend& c, AgentObservation& a) override {
    if (silent.count(a.machine_id)) {
      a.pending_command_ids.push_back(c.id);
      return true;
    }
    if (c.kind != CommandKind::kRunDiagnostic) return false;
    DiagnosticOutcome d;
    d.kind = ToString(c.diagnostic.kind);
    d.passed = true;
    d.machine_id = a.machine_id;
    a.command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, d, false, {}};
    return true;
  }
};

TEST_CASE("stop-time diagnosis in the engine: a half-open agent evicts nothing, the diagnosis passes and reattempts", "[unit]") {
  DiagnosisWorld w;
  const std::string cut = w.status.slots[2].machine_id;
  w.silent.insert(cut);
  w.StartDiagnosis();
  for (int i = 0; i < 200 && w.status.diagnosis; ++i) w.Round(5 * kSecond);
  REQUIRE_FALSE(w.status.diagnosis.has_value());
  CHECK(w.status.evicted.empty());
  CHECK(w.quarantined.empty());
  const Incident& inc = w.status.incidents.back();
  CHECK_THAT(inc.decision, Catch::Contains("reattempt in place"));
  bool inconclusive = false;
  for (const DiagnosisStageRecord& r : inc.diagnosis) {
    CHECK(r.failed_machines.empty());
    for (const std::string& line : r.results) inconclusive = inconclusive || line.find(cut + ": inconclusive: agent link lost") == 0;
  }
  CHECK(inconclusive);
}

TEST_CASE("stop-time diagnosis in the engine: a node unready with its agent silent ends the diagnosis and evicts that machine", "[unit]") {
  DiagnosisWorld w;
  const std::string dead = w.status.slots[3].machine_id;
  w.StartDiagnosis();
  w.silent.insert(dead);
  PodObservation* p = w.Pod(w.status.slots[3].pod);
  p->node_unready = true;
  p->reason = "node " + dead + " NotReady (Ready=Unknown)";
  // Within the heartbeat timeout the agent still vouches for the machine.
  w.Round(5 * kSecond);
  REQUIRE(w.status.diagnosis.has_value());
  CHECK(w.status.evicted.empty());
  for (int i = 0; i < 20 && w.status.diagnosis; ++i) w.Round(5 * kSecond);
  REQUIRE_FALSE(w.status.diagnosis.has_value());
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == dead);
  CHECK(w.status.evicted[0].machine_fault);
  CHECK_THAT(w.status.incidents.back().signal, Catch::Contains("and its agent silent for"));
  CHECK(w.quarantined == std::vector<std::string>{dead});
}

TEST_CASE("stop-time diagnosis in the engine: a pod OOMKilled during the diagnosis is replaced without quarantine", "[unit]") {
  DiagnosisWorld w;
  w.StartDiagnosis();
  const std::string victim = w.status.slots[1].pod;
  const std::string machine = w.status.slots[1].machine_id;
  PodObservation* p = w.Pod(victim);
  p->running = false;
  p->failed = true;
  p->not_machine_fault = true;
  p->reason = "container trainer OOMKilled (exit code 137)";
  w.Round(kSecond);
  REQUIRE_FALSE(w.status.diagnosis.has_value());
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == machine);
  CHECK_FALSE(w.status.evicted[0].machine_fault);
  CHECK(w.status.slots[1].pod != victim);  // replaced
  for (int i = 0; i < 5; ++i) w.Round(kSecond);
  CHECK(w.quarantined.empty());
}

}  // namespace
}  // namespace peregrine
