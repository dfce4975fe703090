// A network partition between one agent and the controller (the agent silent, its pod
// running on a Ready node) evicts nothing: while training runs, during a hang's stack
// capture and during a stop-time diagnosis, for 30 s, 5 min and 15 min of simulated
// silence, with the server's keepalive closing the stream or the stream left half-open.
// The partitioned agent's ranks keep training (its steps reach the controller when the link
// heals); commands sent to it are held and answered after the heal. A pod that fails
// during the partition is still evicted. Decision core on simulated time
// (agent_reach.h, decide_triage.cc, decision_engine.cc).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/core/agent_reach.h"
#include "controller/core/conditions.h"
#include "controller/core/decision_engine.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kRound = 5 * kSecond;         // the controller decides every 5 s
constexpr int64_t kKeepaliveClose = 40 * kSecond;  // gRPC keepalive: 30 s ping + 10 s timeout

enum class Phase { kRunning, kHangCapture, kDiagnosis };

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kRunning: return "running";
    case Phase::kHangCapture: return "hang capture";
    case Phase::kDiagnosis: return "stop-time diagnosis";
  }
  return "?";
}

ProcessStack Stack(int pid) {
  ProcessStack p;
  p.pid = pid;
  p.tool = "eu-stack";
  ThreadStack t;
  t.thread_id = pid;
  for (const char* f : {"poll", "ncclAllReduce", "TrainStep", "main"}) t.frames.push_back(StackFrame{f, "", 0, "", 0});
  p.threads.push_back(t);
  return p;
}

// The kit's plan-applying world with one agent's link cut: the partitioned agent sends
// nothing (its last_seen and steps stay as the controller last heard them) and commands
// sent to it are held; every other agent heartbeats, answers stack captures with the same
// stacks and passes every diagnostic.
struct World : testing::PlanWorld {
  explicit World(bool keepalive_closes) : PlanWorld(testing::DemoJob()), keepalive_closes(keepalive_closes) {
    port_per_attempt = false;
    Step();
    for (AgentObservation& a : obs.agents) a.last_seen = now;  // registered just now
    Step();
    REQUIRE(status.attempt == 1);
  }

  bool keepalive_closes;
  std::string partitioned;     // the pod whose link is cut ("": none)
  int64_t partition_start = 0;
  std::vector<CommandToSend> held;  // commands sent to the partitioned agent
  bool training = true;        // false: every rank is hung (no step anywhere)
  uint64_t step = 10;
  int deletions = 0;
  int quarantines = 0;
  std::vector<JobEvent> events;

  void Cut(const std::string& pod) {
    partitioned = pod;
    partition_start = now;
  }
  // The link heals: the agent's stream comes back with its current steps, and it answers
  // what was held (the registry re-sends pending commands to a stream that came back).
  void Heal() {
    AgentObservation* a = Agent(partitioned);
    partitioned.clear();
    if (a == nullptr) return;
    a->connected = true;
    a->last_seen = now;
    std::vector<CommandToSend> commands = std::move(held);
    held.clear();
    a->pending_command_ids.clear();
    for (const CommandToSend& c : commands) Apply(c, *a);
    if (training) SetSteps(*a);
  }
  // One decision round `kRound` later: the ranks train (unless hung), the reachable agents
  // heartbeat, the partitioned one's stream is closed by the keepalive after 40 s.
  JobPlan Round() {
    now += kRound;
    if (training) ++step;
    for (AgentObservation& a : obs.agents) {
      if (a.pod == partitioned) {
        if (keepalive_closes && now - partition_start >= kKeepaliveClose) a.connected = false;
        continue;
      }
      a.last_seen = now;
      if (training && a.phase == AgentTrainingPhase::kRunning) SetSteps(a);
    }
    JobPlan plan = Step();
    deletions += static_cast<int>(plan.delete_pods.size());
    quarantines += static_cast<int>(plan.quarantine.size());
    events.insert(events.end(), plan.events.begin(), plan.events.end());
    return plan;
  }
  void Rounds(int64_t duration) {
    for (int64_t t = 0; t < duration; t += kRound) Round();
  }
  int Count(const std::string& reason) const {
    return static_cast<int>(
        std::count_if(events.begin(), events.end(), [&](const JobEvent& e) { return e.reason == reason; }));
  }
  bool Unreachable() const {
    const Condition* c = FindCondition(status, kAgentUnreachableCondition);
    return c != nullptr && c->status == ConditionStatus::kTrue;
  }

 protected:
  bool OnCommand(const CommandToSend& c, AgentObservation& a) override {
    if (a.pod == partitioned) {
      held.push_back(c);
      a.pending_command_ids.push_back(c.id);
      return true;
    }
    Apply(c, a);
    return true;
  }

 private:
  void SetSteps(AgentObservation& a) {
    for (const SlotStatus& slot : status.slots) {
      if (slot.pod != a.pod || a.attempt != status.attempt) continue;
      for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) a.rank_steps[r] = step;
      a.mean_iteration_seconds = 0.1;
    }
  }
  // What a reachable agent does with a command (PlanWorld's defaults, plus stack captures
  // and diagnostics).
  void Apply(const CommandToSend& c, AgentObservation& a) {
    CommandResultObservation r{c.id, true, 0, "", now, std::nullopt, false, {}};
    switch (c.kind) {
      case CommandKind::kStop:
        a.phase = AgentTrainingPhase::kIdle;
        break;
      case CommandKind::kCaptureStacks: {
        r.has_stacks = true;
        for (const SlotStatus& slot : status.slots) {
          if (slot.pod != a.pod) continue;
          for (int rank = slot.index * 2; rank < slot.index * 2 + 2; ++rank) {
            r.stacks[rank].push_back(CapturedProcessStack{Stack(100 + rank), ""});
          }
        }
        break;
      }
      case CommandKind::kRunDiagnostic: {
        DiagnosticOutcome d;
        d.kind = ToString(c.diagnostic.kind);
        d.passed = true;
        d.machine_id = a.machine_id;
        if (d.kind == "alignment" || d.kind == "replay") d.digest = "good";
        r.diagnostic = d;
        break;
      }
      default:
        a.attempt = c.assignment.attempt;
        a.phase = AgentTrainingPhase::kRunning;
        a.registered_as_standby = false;
        a.exits.clear();
        a.rank_steps.clear();
        return;
    }
    a.command_results[c.id] = r;
  }
};

// Drives `phase`, cuts slot 1's link at its start for `silence`, heals, and lets the job
// settle for 3 minutes.
void RunPartition(World& w, Phase phase, int64_t silence) {
  w.Rounds(60 * kSecond);  // training
  const std::string victim = w.status.slots[1].pod;
  switch (phase) {
    case Phase::kRunning:
      w.Cut(victim);
      break;
    case Phase::kHangCapture:
      w.training = false;  // every rank hangs: detected after the 60 s hang timeout
      for (int i = 0; i < 40 && w.status.stack_diagnosis.investigations.empty(); ++i) w.Round();
      REQUIRE(w.status.stack_diagnosis.investigations.size() == 1);
      // The captures went out this round; the victim's link is cut before its answer
      // arrives: the answer is lost, the command stays pending (re-sent on the heal).
      w.Cut(victim);
      if (AgentObservation* a = w.Agent(victim)) {
        for (auto it = a->command_results.begin(); it != a->command_results.end();) {
          if (it->first.find("/stacks-") == std::string::npos) {
            ++it;
            continue;
          }
          a->pending_command_ids.push_back(it->first);
          CommandToSend again;
          again.pod = victim;
          again.id = it->first;
          again.kind = CommandKind::kCaptureStacks;
          w.held.push_back(again);
          it = a->command_results.erase(it);
        }
      }
      break;
    case Phase::kDiagnosis:
      w.training = false;
      for (int i = 0; i < 80 && !w.status.diagnosis; ++i) w.Round();
      REQUIRE(w.status.diagnosis.has_value());  // identical stacks everywhere: no culprit
      w.Cut(victim);
      break;
  }
  const int64_t start = w.now;
  bool shown = false;
  while (w.now - start < silence) {
    w.Round();
    shown = shown || w.Unreachable();
    CHECK(w.deletions == 0);
    CHECK(w.quarantines == 0);
    CHECK(w.status.evicted.empty());
  }
  if (silence > 40 * kSecond) {
    CHECK(shown);
    CHECK(w.Count("AgentUnreachable") == 1);
  }
  w.training = true;
  w.Heal();
  w.Rounds(180 * kSecond);
  CHECK(w.status.slots[1].pod == victim);
  CHECK_FALSE(w.Unreachable());
  if (silence > 40 * kSecond) CHECK(w.Count("AgentReachable") == 1);
}

TEST_CASE("JudgeAgentReach: silent or disconnected on a running pod of a Ready node is unreachable", "[unit]") {
  const int64_t now = 1000 * kSecond;
  PodObservation pod{"demo-m1", "m1", true, false, "", "", 0, false, false, {}, ""};
  AgentObservation a;
  a.pod = "demo-m1";
  a.connected = true;
  a.last_seen = now - 30 * kSecond;
  CHECK(JudgeAgentReach(&pod, &a, 30 * kSecond, now).reach == AgentReach::kReachable);
  a.last_seen = now - 31 * kSecond;
  AgentReachJudgement j = JudgeAgentReach(&pod, &a, 30 * kSecond, now);
  CHECK(j.reach == AgentReach::kUnreachable);
  CHECK_THAT(j.reason, Catch::Contains("silent past the heartbeat timeout of 30s"));
  CHECK_THAT(j.reason, Catch::Contains("last message at 1970-01-01T00:16:09Z"));
  a.last_seen = now;
  a.connected = false;
  CHECK_THAT(JudgeAgentReach(&pod, &a, 30 * kSecond, now).reason, Catch::Contains("disconnected"));
  // The pod's own rules decide a failed pod, an unready node, a pod not running, no agent.
  PodObservation failed = pod;
  failed.failed = true;
  failed.running = false;
  CHECK(JudgeAgentReach(&failed, &a, 30 * kSecond, now).reach == AgentReach::kNotJudged);
  PodObservation unready = pod;
  unready.node_unready = true;
  CHECK(JudgeAgentReach(&unready, &a, 30 * kSecond, now).reach == AgentReach::kNotJudged);
  PodObservation pending = pod;
  pending.running = false;
  CHECK(JudgeAgentReach(&pending, &a, 30 * kSecond, now).reach == AgentReach::kNotJudged);
  CHECK(JudgeAgentReach(&pod, nullptr, 30 * kSecond, now).reach == AgentReach::kNotJudged);
  CHECK(JudgeAgentReach(nullptr, &a, 30 * kSecond, now).reach == AgentReach::kNotJudged);
}

TEST_CASE("AgentUnreachable condition: one event when an agent is lost, one when it is back, none repeated", "[unit]") {
  JobStatus st;
  const std::vector<UnreachableAgent> one = {{"demo-m1", "m1", "agent disconnected (stream closed)"}};
  std::vector<JobEvent> e = UpdateAgentUnreachableCondition(one, 1, 10, st);
  REQUIRE(e.size() == 1);
  CHECK(e[0].reason == "AgentUnreachable");
  CHECK(e[0].type == JobEventType::kWarning);
  const Condition* c = FindCondition(st, kAgentUnreachableCondition);
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kTrue);
  CHECK(c->reason == "AgentLinkLost");
  CHECK_THAT(c->message, Catch::Contains("pod demo-m1 (machine m1): agent disconnected"));
  CHECK(UpdateAgentUnreachableCondition(one, 1, 20, st).empty());
  // A second pod: one event, for it.
  std::vector<UnreachableAgent> two = one;
  two.push_back({"demo-m2", "m2", "agent silent"});
  e = UpdateAgentUnreachableCondition(two, 1, 30, st);
  REQUIRE(e.size() == 1);
  CHECK_THAT(e[0].message, Catch::Contains("demo-m2"));
  // Both back.
  e = UpdateAgentUnreachableCondition({}, 1, 40, st);
  REQUIRE(e.size() == 2);
  CHECK(e[0].reason == "AgentReachable");
  CHECK(e[1].reason == "AgentReachable");
  CHECK(FindCondition(st, kAgentUnreachableCondition)->status == ConditionStatus::kFalse);
  CHECK(UpdateAgentUnreachableCondition({}, 1, 50, st).empty());
}

TEST_CASE("A partitioned agent evicts nothing: 30 s, 5 min and 15 min, running, hang capture and diagnosis", "[unit]") {
  for (Phase phase : {Phase::kRunning, Phase::kHangCapture, Phase::kDiagnosis}) {
    for (int64_t silence : {30 * kSecond, 300 * kSecond, 900 * kSecond}) {
      for (bool keepalive_closes : {true, false}) {
        INFO(PhaseName(phase) << ", " << silence / kSecond << " s, stream "
                              << (keepalive_closes ? "closed by keepalive" : "half-open"));
        World w(keepalive_closes);
        RunPartition(w, phase, silence);
        CHECK(w.deletions == 0);
        CHECK(w.quarantines == 0);
        CHECK(w.status.evicted.empty());
        CHECK(w.quarantined.empty());
        CHECK(w.status.phase != JobPhase::kFailed);
        if (phase == Phase::kRunning) {
          CHECK(w.status.incidents.empty());  // not even a restart
          CHECK(w.status.attempt == 1);
          CHECK(w.status.last_completed_step >= w.step - 1);
        }
      }
    }
  }
}

TEST_CASE("A partitioned agent whose pod fails is evicted as before", "[unit]") {
  World w(/*keepalive_closes=*/true);
  w.Rounds(60 * kSecond);
  const std::string victim = w.status.slots[1].pod;
  const std::string machine = w.status.slots[1].machine_id;
  w.Cut(victim);
  w.Rounds(300 * kSecond);
  REQUIRE(w.status.evicted.empty());
  PodObservation* p = w.Pod(victim);
  p->running = false;
  p->failed = true;
  p->reason = "process group exited with signal 9";
  w.Rounds(30 * kSecond);
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == machine);
  CHECK(w.status.slots[1].pod != victim);
}

}  // namespace
}  // namespace peregrine
