// The controller's side of the in-memory checkpoint wire and state: the CheckpointPlan in
// assignments (slots resolved to the data addresses the agents registered), store reports
// and events into observations, spec.checkpoint parsing, and status.checkpoint in JSON.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "controller/agent_registry.h"
#include "controller/job_parser.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

class RecordingSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage& message) override { sent.push_back(message); }
  std::vector<v1::ControllerMessage> sent;
};

AssignmentSpec WithPlan(int slot, int peer) {
  AssignmentSpec a;
  a.slot = slot;
  a.attempt = 1;
  a.checkpoint.interval_steps = 10;
  a.checkpoint.backup_copies = 1;
  a.checkpoint.backup_to = {peer};
  a.checkpoint.hold_for = {peer};
  a.checkpoint.restore_step = 30;
  a.checkpoint.restore_from = {peer};
  a.checkpoint.memory_limit_bytes = 1 << 30;
  a.checkpoint.backup_bandwidth_bytes_per_second = 5 << 20;
  a.checkpoint.persist_every_steps = 100;
  a.checkpoint.persist_dir = "/ckpt";
  a.checkpoint.committed_step = 30;
  return a;
}

v1::Register Reg(const std::string& pod, const std::string& address) {
  v1::Register reg;
  reg.set_job_name("j");
  reg.set_pod_name(pod);
  reg.set_role(v1::AGENT_ROLE_ACTIVE);
  reg.set_data_address(address);
  return reg;
}

TEST_CASE("the assignment's checkpoint plan names its peers by the data addresses they registered", "[unit]") {
  const TrainingJobSpec spec = testing::TrainJob(2, 2, 2).spec;
  AgentRegistry registry("test");
  registry.BindJob("default/j", AgentRegistry::JobBinding{spec, ""});
  registry.SetDesired("default/j", {{"j-m0", DesiredAgent{false, WithPlan(0, 1)}},
                                    {"j-m1", DesiredAgent{false, WithPlan(1, 0)}}});
  auto s0 = std::make_shared<RecordingSink>();
  auto s1 = std::make_shared<RecordingSink>();
  REQUIRE(registry.OnRegister(s1, "", Reg("j-m1", "10.0.0.2:7000"), 1).ok());
  absl::StatusOr<v1::RegisterAck> ack = registry.OnRegister(s0, "", Reg("j-m0", "10.0.0.1:7000"), 2);
  REQUIRE(ack.ok());
  const v1::CheckpointPlan& p = ack->assignment().checkpoint();
  CHECK(p.interval_steps() == 10);
  CHECK(p.backup_copies() == 1);
  REQUIRE(p.backup_to_size() == 1);
  CHECK(p.backup_to(0).slot() == 1);
  CHECK(p.backup_to(0).address() == "10.0.0.2:7000");
  REQUIRE(p.hold_for_size() == 1);
  CHECK(p.hold_for(0) == 1);
  CHECK(p.restore_step() == 30);
  REQUIRE(p.restore_from_size() == 1);
  CHECK(p.restore_from(0).address() == "10.0.0.2:7000");
  CHECK(p.memory_limit_bytes() == 1u << 30);
  CHECK(p.backup_bandwidth_bytes_per_second() == 5u << 20);
  CHECK(p.persist_every_steps() == 100);
  CHECK(p.persist_dir() == "/ckpt");
  CHECK(p.committed_step() == 30);
  // Commands carry it too.
  CommandToSend c;
  c.pod = "j-m1";
  c.id = "default/j/j-m1/attempt-2";
  c.kind = CommandKind::kRestartInPlace;
  c.assignment = WithPlan(1, 0);
  registry.Send("default/j", c, 3);
  REQUIRE(s1->sent.size() == 1);
  CHECK(s1->sent[0].command().restart_in_place().assignment().checkpoint().backup_to(0).address() == "10.0.0.1:7000");
  // Checkpoints off: no plan on the wire.
  CHECK_FALSE(ToWire(AssignmentSpec{}, spec).has_checkpoint());
}


TEST_CASE("a committed step that advances while an attempt runs reaches its agents once, other attempts' do not", "[unit]") {
  const TrainingJobSpec spec = testing::TrainJob(2, 2, 2).spec;
  AgentRegistry registry("test");
  registry.BindJob("default/j", AgentRegistry::JobBinding{spec, ""});
  auto desired = [](uint64_t attempt, uint64_t committed) {
    AssignmentSpec a0 = WithPlan(0, 1), a1 = WithPlan(1, 0);
    a0.attempt = a1.attempt = attempt;
    a0.checkpoint.committed_step = a1.checkpoint.committed_step = committed;
    return std::map<std::string, DesiredAgent>{{"j-m0", DesiredAgent{false, a0}}, {"j-m1", DesiredAgent{false, a1}}};
  };
  registry.SetDesired("default/j", desired(1, 30));
  auto s0 = std::make_shared<RecordingSink>();
  auto s1 = std::make_shared<RecordingSink>();
  REQUIRE(registry.OnRegister(s0, "", Reg("j-m0", "10.0.0.1:7000"), 1).ok());
  REQUIRE(registry.OnRegister(s1, "", Reg("j-m1", "10.0.0.2:7000"), 1).ok());
  const auto commits = [](const RecordingSink& sink) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const v1::ControllerMessage& m : sink.sent) {
      if (m.has_checkpoint_commit() && m.checkpoint_commit().committed_step() != 0) {
        out.emplace_back(m.checkpoint_commit().attempt(), m.checkpoint_commit().committed_step());
      }
    }
    return out;
  };
  // The acks carried step 30: nothing more to say.
  registry.SetDesired("default/j", desired(1, 30));
  CHECK(commits(*s0).empty());
  // Step 40 is complete: each agent hears it once.
  registry.SetDesired("default/j", desired(1, 40));
  registry.SetDesired("default/j", desired(1, 40));
  CHECK(commits(*s0) == std::vector<std::pair<uint64_t, uint64_t>>{{1, 40}});
  CHECK(commits(*s1) == std::vector<std::pair<uint64_t, uint64_t>>{{1, 40}});
  // A new attempt the agents have not been told about yet: its commit waits for its
  // command (which carries the step).
  registry.SetDesired("default/j", desired(2, 40));
  CHECK(commits(*s0).size() == 1);
  // A disconnected agent gets nothing.
  registry.OnDisconnect(s1.get(), 2);
  registry.SetDesired("default/j", desired(1, 50));
  CHECK(commits(*s0).back() == std::pair<uint64_t, uint64_t>{1, 50});
  CHECK(commits(*s1).size() == 1);
}
TEST_CASE("a backup holder whose agent registers after its peers' assignment reaches them in a CheckpointCommit, once", "[unit]") {
  const TrainingJobSpec spec = testing::TrainJob(2, 2, 2).spec;
  AgentRegistry registry("test");
  registry.BindJob("default/j", AgentRegistry::JobBinding{spec, ""});
  const std::map<std::string, DesiredAgent> desired = {{"j-m0", DesiredAgent{false, WithPlan(0, 1)}},
                                                       {"j-m1", DesiredAgent{false, WithPlan(1, 0)}}};
  registry.SetDesired("default/j", desired);
  const auto peer_updates = [](const RecordingSink& sink) {
    std::vector<std::string> out;
    for (const v1::ControllerMessage& m : sink.sent) {
      if (!m.has_checkpoint_commit()) continue;
      CHECK(m.checkpoint_commit().attempt() == 1);
      CHECK(m.checkpoint_commit().committed_step() == 0);  // unchanged: the ack had it
      for (const v1::CheckpointPeerAddress& p : m.checkpoint_commit().backup_to()) {
        out.push_back(absl::StrCat(p.slot(), "=", p.address()));
      }
    }
    return out;
  };
  // Slot 0's agent registers first: its holder (slot 1, a new pod) is not known yet.
  auto s0 = std::make_shared<RecordingSink>();
  absl::StatusOr<v1::RegisterAck> ack = registry.OnRegister(s0, "", Reg("j-m0", "10.0.0.1:7000"), 1);
  REQUIRE(ack.ok());
  REQUIRE(ack->assignment().checkpoint().backup_to_size() == 1);
  CHECK(ack->assignment().checkpoint().backup_to(0).address().empty());
  registry.SetDesired("default/j", desired);
  CHECK(peer_updates(*s0).empty());
  // The holder's agent registers: slot 0 hears its address once.
  auto s1 = std::make_shared<RecordingSink>();
  REQUIRE(registry.OnRegister(s1, "", Reg("j-m1", "10.0.0.2:7000"), 2).ok());
  registry.SetDesired("default/j", desired);
  registry.SetDesired("default/j", desired);
  CHECK(peer_updates(*s0) == std::vector<std::string>{"1=10.0.0.2:7000"});
  CHECK(peer_updates(*s1).empty());  // its ack named slot 0's address
  // The holder's agent restarts on another port: slot 0 hears the new address.
  auto s1b = std::make_shared<RecordingSink>();
  REQUIRE(registry.OnRegister(s1b, "", Reg("j-m1", "10.0.0.2:7001"), 3).ok());
  registry.SetDesired("default/j", desired);
  CHECK(peer_updates(*s0) == std::vector<std::string>{"1=10.0.0.2:7000", "1=10.0.0.2:7001"});
}

TEST_CASE("store reports and events become the agent's observation", "[unit]") {
  AgentRegistry registry("test");
  registry.BindJob("default/j", AgentRegistry::JobBinding{testing::TrainJob(2, 2, 2).spec, ""});
  AssignmentSpec a;
  a.slot = 0;
  registry.SetDesired("default/j", {{"j-m0", DesiredAgent{false, a}}});
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(registry.OnRegister(sink, "", Reg("j-m0", "127.0.0.1:9"), 1).ok());
  v1::AgentMessage hb;
  v1::CheckpointReport* r = hb.mutable_heartbeat()->mutable_checkpoint();
  for (uint64_t s : {20, 10}) r->add_stored_steps(s);
  r->add_backed_up_steps(10);
  r->add_persisted_steps(10);
  r->set_store_bytes(123);
  r->set_memory_budget_bytes(456);
  v1::HeldBackup* h = r->add_held();
  h->set_slot(1);
  h->set_step(10);
  REQUIRE(registry.OnMessage(sink.get(), hb, 2).ok());
  v1::AgentMessage ev;
  ev.mutable_event()->set_at(77);
  v1::CheckpointEvent* e = ev.mutable_event()->mutable_checkpoint();
  e->set_kind(v1::CheckpointEvent::RESTORE_FAILED);
  e->set_step(20);
  e->set_global_rank(1);
  e->set_detail("no holder has it");
  REQUIRE(registry.OnMessage(sink.get(), ev, 3).ok());
  const std::vector<AgentObservation> all = registry.Observe("default/j");
  REQUIRE(all.size() == 1);
  const AgentObservation& o = all[0];
  CHECK(o.data_address == "127.0.0.1:9");
  REQUIRE(o.checkpoint.has_value());
  CHECK(o.checkpoint->stored_steps == std::vector<uint64_t>{10, 20});
  CHECK(o.checkpoint->backed_up_steps == std::vector<uint64_t>{10});
  CHECK(o.checkpoint->persisted_steps == std::vector<uint64_t>{10});
  CHECK(o.checkpoint->store_bytes == 123);
  CHECK(o.checkpoint->memory_budget_bytes == 456);
  CHECK(o.checkpoint->held == std::vector<std::pair<int, uint64_t>>{{1, 10}});
  REQUIRE(o.checkpoint_events.size() == 1);
  CHECK(o.checkpoint_events[0].at == 77);
  CHECK(o.checkpoint_events[0].kind == CheckpointEventKind::kRestoreFailed);
  CHECK(o.checkpoint_events[0].step == 20);
  CHECK(o.checkpoint_events[0].global_rank == 1);
  CHECK(o.checkpoint_events[0].detail == "no holder has it");
}

TEST_CASE("byte quantities: Kubernetes suffixes, exponents, and clear errors", "[unit]") {
  CHECK(*ParseByteQuantity("8Gi") == 8ull << 30);
  CHECK(*ParseByteQuantity("500Mi") == 500ull << 20);
  CHECK(*ParseByteQuantity("1G") == 1'000'000'000ull);
  CHECK(*ParseByteQuantity("1.5Gi") == 3ull << 29);
  CHECK(*ParseByteQuantity("1e9") == 1'000'000'000ull);
  CHECK(*ParseByteQuantity("1073741824") == 1ull << 30);
  CHECK(*ParseByteQuantity("0") == 0);
  for (const char* bad : {"8GB", "-1Gi", "", "Gi", "0.5", "1.5", "8 Gi", "16Ei", "1e30"}) {
    INFO(bad);
    const absl::StatusOr<uint64_t> v = ParseByteQuantity(bad);
    REQUIRE_FALSE(v.ok());
    CHECK_THAT(std::string(v.status().message()), Catch::Contains("not a byte quantity"));
  }
}

TEST_CASE("spec.checkpoint: every field parsed, bad values named", "[unit]") {
  const TrainingJob job = testing::ParsedJob(testing::DemoManifest() +
                                             "  checkpoint: {intervalSteps: 5, backupCopies: 2, memoryLimit: 4Gi, "
                                             "backupBandwidth: 1G, persistEverySteps: 100, persistPath: /mnt/ckpt}\n");
  const CheckpointSpec& c = job.spec.checkpoint;
  CHECK(c.interval_steps == 5);
  CHECK(c.backup_copies == 2);
  CHECK(c.memory_limit_bytes == 4ull << 30);
  CHECK(c.backup_bandwidth_bytes_per_second == 1'000'000'000ull);
  CHECK(c.persist_every_steps == 100);
  CHECK(c.persist_path == "/mnt/ckpt");
  CHECK(testing::DemoJob().spec.checkpoint.backup_copies == 1);
  const std::pair<std::string, std::string> cases[] = {
      {"memoryLimit: 8GB", "spec.checkpoint.memoryLimit: not a byte quantity: '8GB' (unknown suffix 'GB'"},
      {"backupBandwidth: -5Mi", "spec.checkpoint.backupBandwidth: not a byte quantity: '-5Mi' (negative"},
      {"intervalSteps: 5, persistEverySteps: -1", "spec.checkpoint.persistEverySteps: must be >= 0"},
      {"persistEverySteps: 10", "spec.checkpoint.persistEverySteps: needs spec.checkpoint.intervalSteps > 0"},
      {"intervalSteps: 5, persistPath: ckpt", "spec.checkpoint.persistPath: must be an absolute path"},
      {"backupCopies: 9", "spec.checkpoint.backupCopies: must be <= 8"},
      {"persistDir: /x", "spec.checkpoint.persistDir: unknown field"},
  };
  for (const auto& [fields, expected] : cases) {
    INFO(fields);
    auto parsed = ParseTrainingJob(testing::DemoManifest() + "  checkpoint: {" + fields + "}\n");
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(expected));
  }
}

TEST_CASE("status.checkpoint and stepsRedone survive a JSON round trip", "[unit]") {
  JobStatus s;
  Incident inc;
  inc.id = 1;
  inc.step_at_failure = 27;
  inc.resume_step = 20;
  inc.steps_redone = 7;
  s.incidents = {inc};
  CheckpointStatus& c = s.checkpoint;
  c.last_complete_step = 20;
  c.last_persisted_step = 10;
  c.placement = {{0, {1, 2}}, {1, {2, 0}}, {2, {0, 1}}};
  c.degraded_reason = "placement degraded: x";
  c.failed_steps = {30};
  c.events = {{1'795'000'000'123'456'000, "j-m1", CheckpointEventKind::kCorruptShard, 20, 3, "crc"}};
  c.events_seen = {{"j-m1", 1'795'000'000'123'456'789}};
  const absl::StatusOr<JobStatus> back = JobStatusFromJson(JobStatusToJson(s));
  REQUIRE(back.ok());
  CHECK(back->incidents[0].steps_redone == 7);
  const CheckpointStatus& b = back->checkpoint;
  CHECK(b.last_complete_step == 20);
  CHECK(b.last_persisted_step == 10);
  CHECK(b.placement == c.placement);
  CHECK(b.degraded_reason == c.degraded_reason);
  CHECK(b.failed_steps == c.failed_steps);
  REQUIRE(b.events.size() == 1);
  CHECK(b.events[0].at == c.events[0].at);
  CHECK(b.events[0].pod == "j-m1");
  CHECK(b.events[0].kind == CheckpointEventKind::kCorruptShard);
  CHECK(b.events[0].step == 20);
  CHECK(b.events[0].global_rank == 3);
  CHECK(b.events[0].detail == "crc");
  CHECK(b.events_seen == c.events_seen);  // nanoseconds kept exactly
  // An unknown event kind is named.
  std::string text = JobStatusToJson(s);
  text.replace(text.find("CorruptShard"), 12, "Exploded");
  const absl::StatusOr<JobStatus> bad = JobStatusFromJson(text);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("checkpoint.events[].kind"));
}

}  // namespace
}  // namespace peregrine
