// set_microbatch_plan end to end: the real peregrine-agent on a real gRPC stream from a
// small test controller, supervising two /bin/sh ranks (DP=2) that read the plan file the
// agent names in PEREGRINE_MICROBATCH_PLAN each step and print their share as mb=. The
// heartbeats' IterationSummary.micro_batches follow the plan; a restart clears it; a bad
// plan is answered with an error naming the field and changes nothing.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

namespace v1 = ::peregrine::v1;
using ::peregrine::testing::ChildProcess;
using ::peregrine::testing::DescendantGuard;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::NoDescendantsLeft;
using ::peregrine::testing::TempDir;

// Answers Register with the ack, records every message, sends commands on the stream.
class PlanController final : public v1::AgentService::Service {
 public:
  explicit PlanController(v1::RegisterAck ack) : ack_(std::move(ack)) {}

  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (message.has_register_()) {
        stream_ = stream;
        v1::ControllerMessage reply;
        *reply.mutable_register_ack() = ack_;
        stream->Write(reply);
      }
      messages_.push_back(message);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ == stream) stream_ = nullptr;
    return grpc::Status::OK;
  }

  bool Send(const v1::Command& command) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ == nullptr) return false;
    v1::ControllerMessage message;
    *message.mutable_command() = command;
    return stream_->Write(message);
  }

  size_t Count() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

  // The first message after index `from` matching `match`, waiting up to `limit`.
  std::optional<v1::AgentMessage> WaitFor(const std::function<bool(const v1::AgentMessage&)>& match, size_t from = 0,
                                          absl::Duration limit = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoSeconds(limit);
    for (;;) {
      for (size_t i = from; i < messages_.size(); ++i) {
        if (match(messages_[i])) return messages_[i];
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
    }
  }

 private:
  const v1::RegisterAck ack_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::AgentMessage> messages_;
  grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream_ = nullptr;
};

// Each rank: its share is counts[dp] of the plan file while there is one, else 2; printed
// with every step. The plan's from_step is honoured.
const char kRank[] =
    "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); mb=2; "
    "if [ -f \"$PEREGRINE_MICROBATCH_PLAN\" ]; then "
    "  from=$(sed -n 's/^from_step=//p' \"$PEREGRINE_MICROBATCH_PLAN\"); "
    "  c=$(sed -n 's/^counts=//p' \"$PEREGRINE_MICROBATCH_PLAN\" | cut -d, -f$((PEREGRINE_DP_RANK+1))); "
    "  if [ -n \"$c\" ] && [ \"$i\" -ge \"${from:-0}\" ]; then mb=$c; fi; "
    "fi; echo \"[peregrine] step=$i loss=1 mb=$mb\"; sleep 0.02; done";

v1::Assignment TwoReplicas(uint64_t attempt) {
  v1::Assignment a;
  a.set_world_size(2);
  a.mutable_layout()->set_tensor(1);
  a.mutable_layout()->set_pipeline(1);
  a.mutable_layout()->set_data(2);
  a.mutable_layout()->set_gpus_per_machine(2);
  a.set_master_addr("127.0.0.1");
  a.set_master_port(29556);
  a.set_attempt(attempt);
  for (const char* arg : {"sh", "-c", kRank}) a.mutable_code()->add_command(arg);
  for (uint32_t r = 0; r < 2; ++r) {
    v1::RankInfo* info = a.add_ranks();
    info->set_global_rank(r);
    info->set_local_rank(r);
    info->set_dp(r);
  }
  return a;
}

v1::Command PlanCommand(const std::string& id, std::vector<uint32_t> counts, uint32_t global, double scale) {
  v1::Command c;
  c.set_id(id);
  v1::SetMicroBatchPlan* plan = c.mutable_set_microbatch_plan();
  plan->set_plan_id(counts.empty() ? 0 : 1);
  plan->set_from_step(0);
  for (uint32_t n : counts) plan->add_counts(n);
  plan->set_gradient_scale(scale);
  plan->set_global_micro_batches(global);
  return c;
}

std::function<bool(const v1::AgentMessage&)> ResultFor(const std::string& id) {
  return [id](const v1::AgentMessage& m) { return m.has_command_result() && m.command_result().command_id() == id; };
}

// A heartbeat of `attempt` whose ranks 0 and 1 last ran mb0 and mb1 micro-batches.
std::function<bool(const v1::AgentMessage&)> Shares(uint64_t attempt, uint32_t mb0, uint32_t mb1) {
  return [=](const v1::AgentMessage& m) {
    if (!m.has_heartbeat() || m.heartbeat().training().attempt() != attempt) return false;
    if (m.heartbeat().iterations_size() != 2) return false;
    for (const v1::IterationSummary& it : m.heartbeat().iterations()) {
      if (it.micro_batches() != (it.global_rank() == 0 ? mb0 : mb1)) return false;
    }
    return true;
  };
}

TEST_CASE("the agent writes the micro-batch plan its ranks follow and reports their shares", "[integration]") {
  DescendantGuard guard;
  TempDir dir("peregrine-microbatch-test");
  v1::RegisterAck ack;
  ack.set_controller_id("test");
  ack.set_heartbeat_interval_ms(100);
  ack.set_role(v1::AGENT_ROLE_ACTIVE);
  *ack.mutable_assignment() = TwoReplicas(1);
  PlanController controller(ack);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&controller);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);

  // A plan left behind by an earlier agent of the pod is removed at start.
  const std::string plan_path = dir.Path("logs/microbatch-plan");
  std::filesystem::create_directories(dir.Path("logs"));
  dir.Write("logs/microbatch-plan", "version=1\nplan_id=9\nfrom_step=0\nglobal_micro_batches=4\n"
                                    "gradient_scale=0.5\ncounts=3,1\n");
  ChildProcess::Options options;
  options.argv = {std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent", "--controller",
                  absl::StrCat("127.0.0.1:", port), "--job", "team/plan", "--pod", "pod-0", "--log-dir",
                  dir.Path("logs"), "--grace-ms", "3000", "--checkpoint-root", "off"};
  options.stderr_path = dir.Path("agent.err");
  std::unique_ptr<ChildProcess> agent = ChildProcess::Start(options);
  REQUIRE(agent != nullptr);

  // Even split: no plan file, both ranks run 2.
  REQUIRE(controller.WaitFor(Shares(1, 2, 2)).has_value());

  // A bad plan: the error names the field; the ranks go on with the even split.
  size_t mark = controller.Count();
  REQUIRE(controller.Send(PlanCommand("bad", {1, 0, 3}, 4, 0.5)));
  std::optional<v1::AgentMessage> bad = controller.WaitFor(ResultFor("bad"), mark);
  REQUIRE(bad.has_value());
  CHECK(bad->command_result().status().code() == static_cast<int>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad->command_result().status().message(), Catch::Contains("counts[1]"));
  CHECK_FALSE(std::filesystem::exists(plan_path));

  // counts {1, 3}: rank 0 (dp 0) runs 1, rank 1 (dp 1) runs 3.
  mark = controller.Count();
  REQUIRE(controller.Send(PlanCommand("plan-1", {1, 3}, 4, 0.5)));
  std::optional<v1::AgentMessage> ok = controller.WaitFor(ResultFor("plan-1"), mark);
  REQUIRE(ok.has_value());
  CHECK(ok->command_result().status().code() == 0);
  CHECK(controller.WaitFor(Shares(1, 1, 3), mark).has_value());

  // A restart clears the plan: attempt 2 runs the even split.
  mark = controller.Count();
  v1::Command restart;
  restart.set_id("restart");
  *restart.mutable_restart_in_place()->mutable_assignment() = TwoReplicas(2);
  restart.mutable_restart_in_place()->set_grace_ms(3000);
  REQUIRE(controller.Send(restart));
  REQUIRE(controller.WaitFor(ResultFor("restart"), mark).has_value());
  CHECK(controller.WaitFor(Shares(2, 2, 2), mark).has_value());
  CHECK_FALSE(std::filesystem::exists(plan_path));

  // Set again, then cleared by the empty plan.
  mark = controller.Count();
  REQUIRE(controller.Send(PlanCommand("plan-2", {3, 1}, 4, 0.5)));
  CHECK(controller.WaitFor(Shares(2, 3, 1), mark).has_value());
  mark = controller.Count();
  REQUIRE(controller.Send(PlanCommand("clear", {}, 0, 0)));
  std::optional<v1::AgentMessage> cleared = controller.WaitFor(ResultFor("clear"), mark);
  REQUIRE(cleared.has_value());
  CHECK(cleared->command_result().status().code() == 0);
  CHECK(controller.WaitFor(Shares(2, 2, 2), mark).has_value());
  CHECK_FALSE(std::filesystem::exists(plan_path));

  agent->Signal(SIGTERM);
  CHECK(agent->Wait(std::chrono::seconds(60)).has_value());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  CHECK(Eventually(NoDescendantsLeft));
}

}  // namespace
}  // namespace peregrine
