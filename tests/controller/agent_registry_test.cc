// The registry's translation of the diagnostic, stack-capture and pause/resume commands to
// the wire, and of their results (and the ranks' losses) back into AgentObservation.
#include "controller/agent_registry.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

TrainingJobSpec Spec() { return testing::TrainJob(/*machines=*/2, /*gpus_per_machine=*/2, /*tensor=*/2).spec; }

// Records what the registry sends on one stream.
class RecordingSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage& message) override { sent.push_back(message); }
  std::vector<v1::ControllerMessage> sent;
};

TEST_CASE("Every command kind translates to its wire form", "[unit]") {
  const TrainingJobSpec spec = Spec();
  CommandToSend c;
  c.pod = "j-m0";
  c.id = "default/j/x";

  c.kind = CommandKind::kPause;
  v1::Command w = CommandToWire(c, spec, 42);
  CHECK(w.id() == "default/j/x");
  CHECK(w.issued_at() == 42);
  CHECK(w.kind_case() == v1::Command::kPause);

  c.kind = CommandKind::kResume;
  CHECK(CommandToWire(c, spec, 1).kind_case() == v1::Command::kResume);

  c.kind = CommandKind::kCaptureStacks;
  c.include_native = true;
  w = CommandToWire(c, spec, 1);
  REQUIRE(w.kind_case() == v1::Command::kCaptureStacks);
  CHECK(w.capture_stacks().include_native());

  c.kind = CommandKind::kRunDiagnostic;
  c.diagnostic.kind = DiagnosticKind::kAllGather;
  c.diagnostic.params = {{"master_addr", "10.0.0.1"}, {"master_port", "29600"}, {"machines", "2"}};
  c.diagnostic.timeout_ms = 30000;
  w = CommandToWire(c, spec, 1);
  REQUIRE(w.kind_case() == v1::Command::kRunDiagnostic);
  CHECK(w.run_diagnostic().kind() == "all_gather");
  CHECK(w.run_diagnostic().timeout_ms() == 30000);
  REQUIRE(w.run_diagnostic().params().size() == 3);
  CHECK(w.run_diagnostic().params().at("master_port") == "29600");

  c.kind = CommandKind::kStop;
  c.grace_ms = 500;
  w = CommandToWire(c, spec, 1);
  REQUIRE(w.kind_case() == v1::Command::kStop);
  CHECK(w.stop().grace_ms() == 500);
}

TEST_CASE("A diagnostic result round-trips every field between plain and wire form", "[unit]") {
  DiagnosticOutcome d;
  d.kind = "alignment";
  d.passed = false;
  d.detail = "gpu1: reference digest differs (NaN)";
  d.figures = {{"algbw_gbps", 3.5}, {"busbw_gbps", 5.25}};
  d.failed_ranks = {2, 3};
  d.not_present = false;
  d.digest = "00ff12";
  d.machine_id = "local-3";
  d.seconds = 1.25;
  const DiagnosticOutcome back = DiagnosticFromWire(DiagnosticToWire(d));
  CHECK(back.kind == d.kind);
  CHECK(back.passed == d.passed);
  CHECK(back.detail == d.detail);
  CHECK(back.figures == d.figures);
  CHECK(back.failed_ranks == d.failed_ranks);
  CHECK(back.not_present == d.not_present);
  CHECK(back.digest == d.digest);
  CHECK(back.machine_id == d.machine_id);
  CHECK(back.seconds == d.seconds);
  d.not_present = true;
  d.passed = true;
  CHECK(DiagnosticFromWire(DiagnosticToWire(d)).not_present);
}

TEST_CASE("Captured stacks are grouped by global rank, non-rank processes under -1, raw text kept", "[unit]") {
  v1::CommandResult r;
  r.set_command_id("default/j/stacks-1");
  r.set_finished_at(77);
  auto add = [&](int pid, int rank, const std::string& fn) {
    v1::ProcessStacks* p = r.mutable_stacks()->add_processes();
    p->set_pid(pid);
    p->set_global_rank(rank);
    p->set_command("sim-trainer");
    p->set_tool("eu-stack");
    p->set_raw("PID " + std::to_string(pid) + " - process\n#0 " + fn);
    v1::ThreadStack* t = p->add_threads();
    t->set_thread_id(pid + 1);
    t->set_thread_name("main");
    v1::StackFrame* f = t->add_frames();
    f->set_function(fn);
    f->set_file("trainer.cc");
    f->set_line(12);
    f->set_module("sim-trainer");
    f->set_address(0x1234);
  };
  add(100, 0, "ncclAllReduce");
  add(101, 1, "Compute");
  add(102, -1, "main");
  add(103, -1, "wait");
  const CommandResultObservation o = CommandResultFromWire(r);
  CHECK(o.ok);
  CHECK(o.finished_at == 77);
  CHECK(o.has_stacks);
  CHECK_FALSE(o.diagnostic.has_value());
  REQUIRE(o.stacks.size() == 3);
  REQUIRE(o.stacks.at(-1).size() == 2);
  REQUIRE(o.stacks.at(1).size() == 1);
  const CapturedProcessStack& p = o.stacks.at(1)[0];
  CHECK(p.stack.pid == 101);
  CHECK(p.stack.tool == "eu-stack");
  CHECK(p.raw == "PID 101 - process\n#0 Compute");
  REQUIRE(p.stack.threads.size() == 1);
  CHECK(p.stack.threads[0].thread_id == 102);
  REQUIRE(p.stack.threads[0].frames.size() == 1);
  const StackFrame& f = p.stack.threads[0].frames[0];
  CHECK(f.function == "Compute");
  CHECK(f.file == "trainer.cc");
  CHECK(f.line == 12);
  CHECK(f.module == "sim-trainer");
  CHECK(f.address == 0x1234);
}

struct Registered {
  AgentRegistry registry{"test"};
  std::shared_ptr<RecordingSink> sink = std::make_shared<RecordingSink>();

  Registered() {
    registry.BindJob("default/j", AgentRegistry::JobBinding{Spec(), ""});
    AssignmentSpec a;
    a.slot = 0;
    a.attempt = 1;
    registry.SetDesired("default/j", {{"j-m0", DesiredAgent{false, a}}});
    v1::Register reg;
    reg.set_job_name("j");
    reg.set_pod_name("j-m0");
    reg.set_machine_id("local-0");
    reg.set_role(v1::AGENT_ROLE_ACTIVE);
    reg.mutable_training()->set_attempt(1);
    reg.mutable_training()->set_phase(v1::TRAINING_PHASE_RUNNING);
    REQUIRE(registry.OnRegister(sink, "", reg, 1).ok());
  }
  AgentObservation Observed() {
    auto all = registry.Observe("default/j");
    REQUIRE(all.size() == 1);
    return all[0];
  }
  void Result(const v1::CommandResult& r) {
    v1::AgentMessage m;
    *m.mutable_command_result() = r;
    REQUIRE(registry.OnMessage(sink.get(), m, 2).ok());
  }
};

TEST_CASE("A sent diagnostic is pending until its result, which the observation then carries", "[unit]") {
  Registered reg;
  CommandToSend c;
  c.pod = "j-m0";
  c.id = "default/j/incident-1/eud/j-m0";
  c.kind = CommandKind::kRunDiagnostic;
  c.diagnostic.kind = DiagnosticKind::kEud;
  reg.registry.Send("default/j", c, 5);
  REQUIRE(reg.sink->sent.size() == 1);
  CHECK(reg.sink->sent[0].command().run_diagnostic().kind() == "eud");
  CHECK(reg.Observed().pending_command_ids == std::vector<std::string>{c.id});
  CHECK(reg.Observed().command_results.empty());

  v1::CommandResult r;
  r.set_command_id(c.id);
  r.set_finished_at(9);
  DiagnosticOutcome d;
  d.kind = "eud";
  d.passed = false;
  d.detail = "gpu1: self-test digest differs";
  d.failed_ranks = {1};
  d.machine_id = "local-0";
  *r.mutable_diagnostic() = DiagnosticToWire(d);
  reg.Result(r);
  const AgentObservation o = reg.Observed();
  CHECK(o.pending_command_ids.empty());
  REQUIRE(o.command_results.count(c.id) == 1);
  const CommandResultObservation& got = o.command_results.at(c.id);
  CHECK(got.ok);
  REQUIRE(got.diagnostic.has_value());
  CHECK_FALSE(got.diagnostic->passed);
  CHECK(got.diagnostic->failed_ranks == std::vector<int>{1});
  CHECK(got.diagnostic->detail == d.detail);

  // An error result is recorded with its message too.
  CommandToSend other = c;
  other.id = "default/j/other";
  reg.registry.Send("default/j", other, 6);
  v1::CommandResult bad;
  bad.set_command_id("default/j/other");
  bad.mutable_status()->set_code(3);
  bad.mutable_status()->set_message("run_diagnostic: unknown kind 'xyz'");
  reg.Result(bad);
  const AgentObservation after = reg.Observed();
  const CommandResultObservation& e = after.command_results.at("default/j/other");
  CHECK_FALSE(e.ok);
  CHECK(e.code == 3);
  CHECK(e.message == "run_diagnostic: unknown kind 'xyz'");
}

TEST_CASE("Command results are bounded to the newest 64 per agent", "[unit]") {
  Registered reg;
  for (int i = 0; i < 70; ++i) {
    CommandToSend c;
    c.pod = "j-m0";
    c.id = "id-" + std::to_string(i);
    c.kind = CommandKind::kPause;
    reg.registry.Send("default/j", c, 3);
    v1::CommandResult r;
    r.set_command_id("id-" + std::to_string(i));
    reg.Result(r);
  }
  const AgentObservation o = reg.Observed();
  CHECK(o.command_results.size() == kMaxCommandResults);
  CHECK(o.command_results.count("id-5") == 0);
  CHECK(o.command_results.count("id-6") == 1);
  CHECK(o.command_results.count("id-69") == 1);
}

TEST_CASE("Heartbeats carry each rank's latest loss and grad-norm with its step, NaN included", "[unit]") {
  Registered reg;
  v1::AgentMessage m;
  v1::Heartbeat* hb = m.mutable_heartbeat();
  hb->mutable_training()->set_attempt(1);
  hb->mutable_training()->set_phase(v1::TRAINING_PHASE_RUNNING);
  v1::IterationSummary* a = hb->add_iterations();
  a->set_global_rank(0);
  a->set_last_completed_step(12);
  a->set_last_loss(2.5);
  a->set_last_grad_norm(0.75);
  v1::IterationSummary* b = hb->add_iterations();
  b->set_global_rank(1);
  b->set_last_completed_step(12);
  b->set_last_loss(std::numeric_limits<double>::quiet_NaN());
  b->set_last_grad_norm(1.0);
  REQUIRE(reg.registry.OnMessage(reg.sink.get(), m, 3).ok());
  AgentObservation o = reg.Observed();
  REQUIRE(o.rank_losses.size() == 2);
  CHECK(o.rank_losses.at(0).step == 12);
  CHECK(o.rank_losses.at(0).loss == 2.5);
  CHECK(o.rank_losses.at(0).grad_norm == 0.75);
  CHECK(std::isnan(o.rank_losses.at(1).loss));

  // A new attempt forgets the old attempt's losses.
  v1::AgentMessage next;
  next.mutable_heartbeat()->mutable_training()->set_attempt(2);
  REQUIRE(reg.registry.OnMessage(reg.sink.get(), next, 4).ok());
  CHECK(reg.Observed().rank_losses.empty());
}

}  // namespace
}  // namespace peregrine
