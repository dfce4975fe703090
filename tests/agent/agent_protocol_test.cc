// Protocol round trip: a real gRPC AgentService on 127.0.0.1:0 (a small test
// controller that records what the agent sends and sends commands) and the real
// peregrine-agent binary, which supervises /bin/sh stand-in training. Also the agent's
// credential: presented as the bearer token, replaced by the acked one, and out of the
// training processes' reach.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/controller_link.h"
#include "agent/supervisor.h"
#include "grpcpp/grpcpp.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

namespace v1 = ::peregrine::v1;
using ::peregrine::testing::DescendantGuard;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::NoDescendantsLeft;
using ::peregrine::testing::ReadFileIfExists;
using ::peregrine::testing::TempDir;

constexpr char kToken[] = "s3cret-token";

// Records every AgentMessage and every stream's bearer token; refuses streams whose
// token is not accepted (kToken unless set); answers Register with the configured ack;
// sends commands on the current stream.
class TestController final : public v1::AgentService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override {
    auto auth = context->client_metadata().find("authorization");
    const std::string bearer =
        auth == context->client_metadata().end() ? "" : std::string(auth->second.data(), auth->second.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      bearers_.push_back(bearer);
      cv_.notify_all();
      if (!accepted_.count(bearer)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    }
    v1::AgentMessage message;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (message.has_register_()) {
        stream_ = stream;
        context_ = context;
        v1::ControllerMessage reply;
        *reply.mutable_register_ack() = ack_;
        stream->Write(reply);
      }
      messages_.push_back(message);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ == stream) {
      stream_ = nullptr;
      context_ = nullptr;
    }
    return grpc::Status::OK;
  }

  // The bearer tokens ("Bearer <token>") accepted from now on.
  void Accept(std::set<std::string> tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    accepted_.clear();
    for (const std::string& t : tokens) accepted_.insert("Bearer " + t);
  }
  // Ends the registered stream (as a controller restart does); false when there is none.
  bool CancelStream() {
    std::lock_guard<std::mutex> lock(mu_);
    if (context_ == nullptr) return false;
    context_->TryCancel();
    return true;
  }
  // Waits until `n` streams have been opened; their authorization values, oldest first.
  std::vector<std::string> WaitForStreams(size_t n, absl::Duration limit = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoSeconds(limit), [&] { return bearers_.size() >= n; });
    return bearers_;
  }

  void SetAck(v1::RegisterAck ack) {
    std::lock_guard<std::mutex> lock(mu_);
    ack_ = std::move(ack);
  }

  bool Send(const v1::Command& command) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ == nullptr) return false;
    v1::ControllerMessage message;
    *message.mutable_command() = command;
    return stream_->Write(message);
  }

  std::vector<v1::AgentMessage> Messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

  // Waits for a message (after index `from`) matching `match`; returns it.
  std::optional<v1::AgentMessage> WaitFor(const std::function<bool(const v1::AgentMessage&)>& match, size_t from = 0,
                                          absl::Duration limit = absl::Seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoSeconds(limit);
    while (true) {
      for (size_t i = from; i < messages_.size(); ++i) {
        if (match(messages_[i])) return messages_[i];
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
    }
  }

  size_t Count() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::AgentMessage> messages_;
  v1::RegisterAck ack_;
  grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream_ = nullptr;
  grpc::ServerContext* context_ = nullptr;
  std::vector<std::string> bearers_;
  std::set<std::string> accepted_ = {std::string("Bearer ") + kToken};
};

std::unique_ptr<grpc::Server> Serve(TestController* service, const std::string& address, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

const char kTraining[] =
    "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
    "NODE_RANK=$NODE_RANK NNODES=$NNODES MASTER=$MASTER_ADDR:$MASTER_PORT ATTEMPT=$PEREGRINE_ATTEMPT "
    "RESUME=$PEREGRINE_RESUME_STEP\"; "
    "if [ \"$CRASH_RANK\" = \"$RANK\" ]; then echo \"boom on rank $RANK\"; exit 3; fi; "
    "trap 'echo got-sigterm; exit 0' TERM; i=$PEREGRINE_RESUME_STEP; "
    "while true; do i=$((i+1)); echo \"[peregrine] step=$i loss=2.5 grad_norm=0.5 iter_ms=20\"; sleep 0.05; done";

v1::Assignment MakeAssignment(uint64_t attempt, uint64_t resume_step, const std::string& crash_rank = "") {
  v1::Assignment a;
  a.set_machine_index(0);
  a.set_world_size(2);
  a.mutable_layout()->set_tensor(1);
  a.mutable_layout()->set_pipeline(1);
  a.mutable_layout()->set_data(2);
  a.mutable_layout()->set_gpus_per_machine(2);
  a.set_master_addr("127.0.0.1");
  a.set_master_port(29555);
  a.set_resume_step(resume_step);
  a.set_attempt(attempt);
  a.mutable_code()->add_command("sh");
  a.mutable_code()->add_command("-c");
  a.mutable_code()->add_command(kTraining);
  a.mutable_code()->set_revision("rev-" + std::to_string(attempt));
  if (!crash_rank.empty()) (*a.mutable_code()->mutable_env())["CRASH_RANK"] = crash_rank;
  for (uint32_t r = 0; r < 2; ++r) {
    v1::RankInfo* info = a.add_ranks();
    info->set_global_rank(r);
    info->set_local_rank(r);
    info->set_dp(r);
  }
  return a;
}

v1::Command Cmd(const std::string& id) {
  v1::Command c;
  c.set_id(id);
  return c;
}

bool IsHeartbeat(const v1::AgentMessage& m, v1::TrainingPhase phase, uint64_t attempt) {
  return m.has_heartbeat() && m.heartbeat().training().phase() == phase &&
         m.heartbeat().training().attempt() == attempt;
}

std::set<int> Pids(const v1::TrainingState& state) {
  std::set<int> pids;
  for (const auto& p : state.processes()) pids.insert(p.pid());
  return pids;
}

std::function<bool(const v1::AgentMessage&)> ResultFor(const std::string& id) {
  return [id](const v1::AgentMessage& m) { return m.has_command_result() && m.command_result().command_id() == id; };
}

TEST_CASE("agent protocol round trip with a real controller stream", "[integration]") {
  DescendantGuard guard;
  TempDir temp("peregrine-agent-test");
  const std::string& dir = temp.path();
  temp.Write("token", absl::StrCat(kToken, "\n"));

  auto service = std::make_unique<TestController>();
  v1::RegisterAck ack;
  ack.set_controller_id("test-controller");
  ack.set_heartbeat_interval_ms(100);
  ack.set_role(v1::AGENT_ROLE_ACTIVE);
  *ack.mutable_assignment() = MakeAssignment(1, 0);
  service->SetAck(ack);
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(service.get(), "127.0.0.1:0", &port);
  REQUIRE(server != nullptr);
  REQUIRE(port > 0);

  int agent_exit_code = -1;
  int agent_signal = -1;
  {
    Supervisor launcher;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("PEREGRINE_POD=pod-0");  // from the environment, as in a pod
    ProcessSpec agent;
    agent.global_rank = 0;
    agent.argv = {std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent",
                  "--controller", "127.0.0.1:" + std::to_string(port),
                  "--job", "team-a/llama", "--machine-id", "local-0", "--role", "active",
                  "--credential-file", dir + "/token", "--log-dir", dir + "/logs", "--grace-ms", "5000"};
    agent.env = env;
    REQUIRE(launcher.Start({agent}).ok());
    std::vector<ProcessExitReport> agent_exits;
    std::atomic<bool> pump_stop{false};
    std::mutex pump_mu;
    // Keeps reading the agent's output and reaps it, like a container runtime.
    std::thread pump([&] {
      while (!pump_stop.load()) {
        PollResult r;
        {
          std::lock_guard<std::mutex> lock(pump_mu);
          r = launcher.Poll(absl::Now(), false);
        }
        for (auto& line : r.lines) UNSCOPED_INFO("agent: " << line.text);
        for (auto& e : r.exits) {
          std::lock_guard<std::mutex> lock(pump_mu);
          agent_exits.push_back(e);
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    struct PumpJoiner {
      std::atomic<bool>& stop;
      std::thread& thread;
      ~PumpJoiner() {
        stop = true;
        thread.join();
      }
    } joiner{pump_stop, pump};

    // 1. Register, then training of attempt 1 with parsed progress.
    auto reg = service->WaitFor([](const v1::AgentMessage& m) { return m.has_register_(); });
    REQUIRE(reg.has_value());
    CHECK(reg->register_().job_namespace() == "team-a");
    CHECK(reg->register_().job_name() == "llama");
    CHECK(reg->register_().pod_name() == "pod-0");
    CHECK(reg->register_().machine_id() == "local-0");
    CHECK(reg->register_().role() == v1::AGENT_ROLE_ACTIVE);
    CHECK(reg->register_().agent_start_time() > 0);
    CHECK(reg->register_().training().phase() == v1::TRAINING_PHASE_IDLE);

    auto progressed = service->WaitFor([](const v1::AgentMessage& m) {
      if (!IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 1) || m.heartbeat().iterations_size() != 2) return false;
      for (const auto& it : m.heartbeat().iterations()) {
        if (it.last_completed_step() < 3) return false;
      }
      return true;
    });
    REQUIRE(progressed.has_value());
    for (const auto& it : progressed->heartbeat().iterations()) {
      CHECK(it.last_loss() == Approx(2.5));
      CHECK(it.last_grad_norm() == Approx(0.5));
      CHECK(it.last_step_time() > 0);
    }
    CHECK(service->WaitFor([](const v1::AgentMessage& m) {
      if (!m.has_heartbeat()) return false;
      for (const auto& it : m.heartbeat().iterations()) {
        if (it.steps_in_window() > 0 && it.mean_iteration_seconds() == Approx(0.02)) return true;
      }
      return false;
    }).has_value());
    CHECK(service->WaitFor([](const v1::AgentMessage& m) { return m.has_event() && m.event().has_training_started(); })
              .has_value());
    const std::set<int> attempt1_pids = Pids(progressed->heartbeat().training());
    REQUIRE(attempt1_pids.size() == 2);
    CHECK(Eventually([&] {
      return ReadFileIfExists(dir + "/logs/rank-1.log").find("env RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 "
                                                     "NODE_RANK=0 NNODES=1 MASTER=127.0.0.1:29555 ATTEMPT=1 "
                                                     "RESUME=0") != std::string::npos;
    }));

    // 2. restart_in_place to attempt 2 (resume from step 100).
    v1::Command restart = Cmd("restart-1");
    *restart.mutable_restart_in_place()->mutable_assignment() = MakeAssignment(2, 100);
    restart.mutable_restart_in_place()->set_grace_ms(3000);
    REQUIRE(service->Send(restart));
    auto restarted = service->WaitFor(ResultFor("restart-1"));
    REQUIRE(restarted.has_value());
    CHECK(restarted->command_result().status().code() == 0);
    auto running2 = service->WaitFor([](const v1::AgentMessage& m) {
      if (!IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 2)) return false;
      for (const auto& it : m.heartbeat().iterations()) {
        if (it.last_completed_step() > 100) return true;
      }
      return false;
    });
    REQUIRE(running2.has_value());
    const std::set<int> attempt2_pids = Pids(running2->heartbeat().training());
    REQUIRE(attempt2_pids.size() == 2);
    for (int pid : attempt1_pids) {
      CHECK(attempt2_pids.count(pid) == 0);
      CHECK((::kill(pid, 0) == -1 && errno == ESRCH));
    }
    CHECK(Eventually([&] {
      std::string log = ReadFileIfExists(dir + "/logs/rank-0.log");
      return log.find("===== peregrine attempt 1 rank 0") != std::string::npos &&
             log.find("===== peregrine attempt 2 rank 0 resume_step 100 revision rev-2") != std::string::npos &&
             log.find("got-sigterm") != std::string::npos;
    }));

    // 3. The same id again: the stored result comes back, nothing restarts.
    const size_t before_duplicate = service->Count();
    REQUIRE(service->Send(restart));
    auto duplicate = service->WaitFor(ResultFor("restart-1"), before_duplicate);
    REQUIRE(duplicate.has_value());
    CHECK(duplicate->command_result().finished_at() == restarted->command_result().finished_at());
    auto after_duplicate =
        service->WaitFor([](const v1::AgentMessage& m) { return m.has_heartbeat(); }, service->Count());
    REQUIRE(after_duplicate.has_value());
    CHECK(Pids(after_duplicate->heartbeat().training()) == attempt2_pids);

    // 4. The controller restarts on the same port; training keeps running.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server->Wait();
    server.reset();
    for (int pid : attempt2_pids) CHECK(::kill(pid, 0) == 0);
    auto service2 = std::make_unique<TestController>();
    v1::RegisterAck ack2 = ack;
    *ack2.mutable_assignment() = MakeAssignment(2, 100);  // what the agent already runs
    service2->SetAck(ack2);
    int port2 = 0;
    server = Serve(service2.get(), "127.0.0.1:" + std::to_string(port), &port2);
    REQUIRE(server != nullptr);
    REQUIRE(port2 == port);
    auto reregister = service2->WaitFor([](const v1::AgentMessage& m) { return m.has_register_(); });
    REQUIRE(reregister.has_value());
    CHECK(reregister->register_().training().phase() == v1::TRAINING_PHASE_RUNNING);
    CHECK(reregister->register_().training().attempt() == 2);
    CHECK(Pids(reregister->register_().training()) == attempt2_pids);
    CHECK(reregister->register_().assignment().attempt() == 2);
    CHECK(reregister->register_().agent_start_time() == reg->register_().agent_start_time());
    const auto& ids = reregister->register_().executed_command_ids();
    CHECK(std::find(ids.begin(), ids.end(), "restart-1") != ids.end());
    auto steady = service2->WaitFor([](const v1::AgentMessage& m) {
      return IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 2);
    });
    REQUIRE(steady.has_value());
    CHECK(Pids(steady->heartbeat().training()) == attempt2_pids);

    // 5. Stacks of every training process (and descendants).
    REQUIRE(service2->Send([] {
      v1::Command c = Cmd("stacks-1");
      c.mutable_capture_stacks();
      return c;
    }()));
    auto stacks = service2->WaitFor(ResultFor("stacks-1"), 0, absl::Seconds(240));
    REQUIRE(stacks.has_value());
    CHECK(stacks->command_result().status().code() == 0);
    std::set<int> stacked_ranks;
    std::map<int, int> roots_per_rank;  // descendants (the ranks' sleeps) carry their rank too
    for (const auto& p : stacks->command_result().stacks().processes()) {
      INFO(p.tool() << " " << p.command() << "\n" << p.raw());
      CHECK(!p.raw().empty());
      CHECK(p.raw().size() <= 64 * 1024);
      if (p.global_rank() >= 0) {
        stacked_ranks.insert(p.global_rank());
        if (p.command().rfind("sh -c", 0) == 0) {
          ++roots_per_rank[p.global_rank()];
          CHECK(p.threads_size() > 0);  // the agent parsed the tool's text into frames
          if (p.threads_size() > 0) CHECK(p.threads(0).frames_size() > 0);
        }
        CHECK((p.tool() == "eu-stack" || p.tool() == "gdb" || p.tool() == "py-spy"));
      }
    }
    CHECK(stacked_ranks == std::set<int>{0, 1});
    CHECK(roots_per_rank == std::map<int, int>{{0, 1}, {1, 1}});

    // 6. A diagnostic while training runs: eud with neither dcgmi nor the stand-in cluster
    // is not_present (never a fault), and training is left alone.
    REQUIRE(service2->Send([] {
      v1::Command c = Cmd("diag-1");
      c.mutable_run_diagnostic()->set_kind("eud");
      return c;
    }()));
    auto diag = service2->WaitFor(ResultFor("diag-1"));
    REQUIRE(diag.has_value());
    CHECK(diag->command_result().status().code() == 0);
    CHECK(diag->command_result().diagnostic().kind() == "eud");
    CHECK(diag->command_result().diagnostic().not_present());
    CHECK(diag->command_result().diagnostic().passed());
    CHECK(diag->command_result().diagnostic().machine_id() == "local-0");
    for (int pid : attempt2_pids) CHECK(::kill(pid, 0) == 0);

    // 7. Pause and resume.
    REQUIRE(service2->Send([] {
      v1::Command c = Cmd("pause-1");
      c.mutable_pause();
      return c;
    }()));
    REQUIRE(service2->WaitFor(ResultFor("pause-1")).has_value());
    CHECK(service2->WaitFor([](const v1::AgentMessage& m) { return IsHeartbeat(m, v1::TRAINING_PHASE_PAUSED, 2); })
              .has_value());
    REQUIRE(service2->Send([] {
      v1::Command c = Cmd("resume-1");
      c.mutable_resume();
      return c;
    }()));
    REQUIRE(service2->WaitFor(ResultFor("resume-1")).has_value());
    const size_t after_resume = service2->Count();
    CHECK(service2->WaitFor([](const v1::AgentMessage& m) { return IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 2); },
                            after_resume)
              .has_value());

    // 8. Stop: nothing runs, the agent stays connected and idle.
    REQUIRE(service2->Send([] {
      v1::Command c = Cmd("stop-1");
      c.mutable_stop()->set_grace_ms(3000);
      return c;
    }()));
    auto stopped = service2->WaitFor(ResultFor("stop-1"));
    REQUIRE(stopped.has_value());
    CHECK(stopped->command_result().status().code() == 0);
    auto idle = service2->WaitFor([](const v1::AgentMessage& m) {
      if (!m.has_heartbeat() || m.heartbeat().training().phase() != v1::TRAINING_PHASE_IDLE) return false;
      for (const auto& p : m.heartbeat().training().processes()) {
        if (p.running()) return false;
      }
      return true;
    });
    REQUIRE(idle.has_value());
    for (int pid : attempt2_pids) CHECK((::kill(pid, 0) == -1 && errno == ESRCH));

    // 9. A crash on rank 1 is reported with its exit code and last lines; the
    //    agent does not restart anything by itself.
    v1::Command crash = Cmd("restart-2");
    *crash.mutable_restart_in_place()->mutable_assignment() = MakeAssignment(3, 200, "1");
    REQUIRE(service2->Send(crash));
    REQUIRE(service2->WaitFor(ResultFor("restart-2")).has_value());
    auto exit_event = service2->WaitFor(
        [](const v1::AgentMessage& m) { return m.has_event() && m.event().has_process_exit(); });
    REQUIRE(exit_event.has_value());
    const auto& pe = exit_event->event().process_exit();
    CHECK(pe.global_rank() == 1);
    CHECK(pe.exit_code() == 3);
    CHECK(pe.signal() == 0);
    CHECK(pe.attempt() == 3);
    REQUIRE(pe.last_log_lines_size() >= 1);
    CHECK(pe.last_log_lines(pe.last_log_lines_size() - 1) == "boom on rank 1");
    auto partial = service2->WaitFor([](const v1::AgentMessage& m) {
      if (!IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 3)) return false;
      int running = 0;
      for (const auto& p : m.heartbeat().training().processes()) running += p.running() ? 1 : 0;
      return running == 1;
    });
    REQUIRE(partial.has_value());

    // 10. SIGTERM to the agent is forwarded to training; the agent exits 143.
    int rank0_pid = 0;
    for (const auto& p : partial->heartbeat().training().processes()) {
      if (p.running()) rank0_pid = p.pid();
    }
    REQUIRE(rank0_pid > 0);
    {
      std::lock_guard<std::mutex> lock(pump_mu);
      launcher.SignalAll(SIGTERM);
    }
    REQUIRE(Eventually([&] {
      std::lock_guard<std::mutex> lock(pump_mu);
      return !agent_exits.empty();
    }));
    {
      std::lock_guard<std::mutex> lock(pump_mu);
      agent_exit_code = agent_exits[0].exit_code;
      agent_signal = agent_exits[0].signal;
    }
    CHECK((::kill(rank0_pid, 0) == -1 && errno == ESRCH));
    std::string log = ReadFileIfExists(dir + "/logs/rank-0.log");
    const size_t attempt3 = log.find("===== peregrine attempt 3 rank 0");
    REQUIRE(attempt3 != std::string::npos);
    CHECK(log.find("got-sigterm", attempt3) != std::string::npos);
  }
  CHECK(agent_signal == 0);
  CHECK(agent_exit_code == 143);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server->Wait();
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("standby registers with a self-check and stays idle until activated", "[integration]") {
  DescendantGuard guard;
  TempDir temp("peregrine-standby-test");
  const std::string& dir = temp.path();
  temp.Write("token", kToken);
  auto service = std::make_unique<TestController>();
  v1::RegisterAck ack;
  ack.set_heartbeat_interval_ms(100);
  ack.set_role(v1::AGENT_ROLE_STANDBY);
  service->SetAck(ack);
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(service.get(), "127.0.0.1:0", &port);
  REQUIRE(server != nullptr);
  int exit_code = -1;
  {
    Supervisor launcher;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    ProcessSpec agent;
    agent.argv = {std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent", "--controller",
                  "127.0.0.1:" + std::to_string(port), "--job", "ns/j", "--pod", "standby-0", "--role",
                  "standby", "--credential-file", dir + "/token", "--log-dir", dir + "/logs"};
    agent.env = env;
    REQUIRE(launcher.Start({agent}).ok());
    auto drive_until = [&](const std::function<bool()>& done) {
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (!done() && absl::Now() < deadline) {
        for (auto& e : launcher.Poll(absl::Now(), false).exits) exit_code = e.exit_code;
        absl::SleepFor(absl::Milliseconds(20));
      }
      return done();
    };
    std::optional<v1::AgentMessage> reg;
    REQUIRE(drive_until([&] {
      reg = service->WaitFor([](const v1::AgentMessage& m) { return m.has_register_(); }, 0, absl::ZeroDuration());
      return reg.has_value();
    }));
    CHECK(reg->register_().role() == v1::AGENT_ROLE_STANDBY);
    CHECK(reg->register_().self_check().passed());
    CHECK(reg->register_().self_check().detail().find("cpu: ok") != std::string::npos);
    CHECK(reg->register_().self_check().checked_at() > 0);
    REQUIRE(drive_until([&] {
      return service->WaitFor([](const v1::AgentMessage& m) { return IsHeartbeat(m, v1::TRAINING_PHASE_IDLE, 0); }, 0,
                              absl::ZeroDuration())
          .has_value();
    }));
    v1::Command activate = Cmd("activate-1");
    *activate.mutable_activate()->mutable_assignment() = MakeAssignment(4, 0);
    REQUIRE(service->Send(activate));
    REQUIRE(drive_until([&] {
      return service->WaitFor(ResultFor("activate-1"), 0, absl::ZeroDuration()).has_value() &&
             service->WaitFor([](const v1::AgentMessage& m) { return IsHeartbeat(m, v1::TRAINING_PHASE_RUNNING, 4); },
                              0, absl::ZeroDuration())
                 .has_value();
    }));
    launcher.SignalAll(SIGTERM);
    REQUIRE(drive_until([&] { return launcher.Idle(); }));
  }
  CHECK(exit_code == 143);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server->Wait();
  CHECK(Eventually(NoDescendantsLeft));
}

// The training process (as the agent's user, not root, so only the agent's own
// protection stands in the way) looks for the agent's credential: the file it came in,
// its own environment, the agent's command line, and the agent's memory.
const char kCredentialProbe[] =
    "if [ -e \"$PROBE_FILE\" ]; then echo leak-file; else echo no-file; fi; "
    "if env | grep -q -e bootstrap-7f3a9c -e credential-5e1d2b; then echo leak-env; else echo no-env; fi; "
    "if grep -q -a -e bootstrap-7f3a9c -e credential-5e1d2b /proc/$PPID/cmdline; then echo leak-argv; "
    "else echo no-argv; fi; "
    "if (exec 3</proc/$PPID/mem) 2>/dev/null; then echo leak-mem; else echo no-mem; fi; "
    "if (exec 3</proc/$PPID/environ) 2>/dev/null; then echo leak-environ; else echo no-environ; fi; "
    "echo \"parent=$(cat /proc/$PPID/comm)\"; echo probe-done; "
    "trap 'exit 0' TERM; while true; do sleep 0.05; done";

TEST_CASE("The agent presents its bootstrap token then the acked credential and training cannot read either", "[integration]") {
  DescendantGuard guard;
  TempDir temp("peregrine-credential-test");
  const std::string& dir = temp.path();
  constexpr uid_t kNobody = 65534;
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  const std::string credential_file = dir + "/bootstrap";
  temp.Write("bootstrap", "bootstrap-7f3a9c\n");
  REQUIRE(::chown(credential_file.c_str(), kNobody, kNobody) == 0);
  REQUIRE(::chmod(credential_file.c_str(), 0400) == 0);

  auto service = std::make_unique<TestController>();
  service->Accept({"bootstrap-7f3a9c", "credential-5e1d2b"});
  v1::RegisterAck ack;
  ack.set_heartbeat_interval_ms(100);
  ack.set_role(v1::AGENT_ROLE_ACTIVE);
  ack.set_agent_credential("credential-5e1d2b");
  v1::Assignment assignment = MakeAssignment(1, 0);
  assignment.set_world_size(1);
  assignment.mutable_layout()->set_data(1);
  assignment.mutable_layout()->set_gpus_per_machine(1);
  assignment.clear_ranks();
  v1::RankInfo* rank = assignment.add_ranks();
  rank->set_global_rank(0);
  assignment.mutable_code()->clear_command();
  for (const char* arg : {"sh", "-c", kCredentialProbe}) assignment.mutable_code()->add_command(arg);
  (*assignment.mutable_code()->mutable_env())["PROBE_FILE"] = credential_file;
  *ack.mutable_assignment() = assignment;
  service->SetAck(ack);
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve(service.get(), "127.0.0.1:0", &port);
  REQUIRE(server != nullptr);
  {
    Supervisor launcher;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    ProcessSpec agent;
    // The agent runs as an ordinary user (root could read any process's memory).
    agent.argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent", "--controller",
                  "127.0.0.1:" + std::to_string(port), "--job", "ns/j", "--pod", "p-0", "--credential-file",
                  credential_file, "--log-dir", dir + "/logs", "--checkpoint-root", "off", "--grace-ms", "5000"};
    agent.env = env;
    REQUIRE(launcher.Start({agent}).ok());
    std::vector<std::string> agent_output;
    auto drive_until = [&](const std::function<bool()>& done) {
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (!done() && absl::Now() < deadline) {
        for (auto& line : launcher.Poll(absl::Now(), false).lines) agent_output.push_back(line.text);
        absl::SleepFor(absl::Milliseconds(20));
      }
      return done();
    };
    const std::string log = dir + "/logs/rank-0.log";
    REQUIRE(drive_until([&] { return ReadFileIfExists(log).find("probe-done") != std::string::npos; }));
    for (const std::string& line : agent_output) UNSCOPED_INFO("agent: " << line);
    const std::string probe = ReadFileIfExists(log);
    INFO(probe);
    CHECK(probe.find("parent=peregrine-agent") != std::string::npos);
    CHECK(probe.find("no-file") != std::string::npos);
    CHECK(probe.find("no-env") != std::string::npos);
    CHECK(probe.find("no-argv") != std::string::npos);
    CHECK(probe.find("no-mem") != std::string::npos);
    CHECK(probe.find("no-environ") != std::string::npos);
    CHECK(probe.find("leak") == std::string::npos);

    // The first stream carried the bootstrap token; after the stream ends (a controller
    // restart), the next carries the acked credential.
    REQUIRE(service->CancelStream());
    std::vector<std::string> bearers;
    REQUIRE(drive_until([&] {
      bearers = service->WaitForStreams(2, absl::ZeroDuration());
      return bearers.size() >= 2;
    }));
    CHECK(bearers[0] == "Bearer bootstrap-7f3a9c");
    CHECK(bearers[1] == "Bearer credential-5e1d2b");
    launcher.SignalAll(SIGTERM);
    REQUIRE(drive_until([&] { return launcher.Idle(); }));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server->Wait();
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("TakeCredentialFile returns the stripped text and removes the file or names what is wrong", "[unit]") {
  TempDir temp("peregrine-take-credential");
  temp.Write("c", "  abc123\n");
  absl::StatusOr<std::string> c = TakeCredentialFile(temp.path() + "/c");
  REQUIRE(c.ok());
  CHECK(*c == "abc123");
  CHECK_FALSE(std::filesystem::exists(temp.path() + "/c"));
  absl::StatusOr<std::string> gone = TakeCredentialFile(temp.path() + "/c");
  CHECK(gone.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(gone.status().message()), Catch::Contains(temp.path() + "/c"));
  temp.Write("empty", "\n");
  CHECK_THAT(std::string(TakeCredentialFile(temp.path() + "/empty").status().message()), Catch::Contains("is empty"));
  CHECK_FALSE(std::filesystem::exists(temp.path() + "/empty"));
}

}  // namespace
}  // namespace peregrine
