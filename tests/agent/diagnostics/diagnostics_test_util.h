// Test harness for diagnostics: a fake controller (real gRPC AgentService on 127.0.0.1:0)
// that several real peregrine-agent processes dial, a stand-in cluster fault table, and a
// helper that sends one RunDiagnostic to one agent and waits for its CommandResult.
// Everything is torn down on scope exit (agents SIGTERMed, then every descendant killed by
// the DescendantGuard the tests hold; temporary files removed). Tests only.
#ifndef PEREGRINE_TESTS_AGENT_DIAGNOSTICS_DIAGNOSTICS_TEST_UTIL_H_
#define PEREGRINE_TESTS_AGENT_DIAGNOSTICS_DIAGNOSTICS_TEST_UTIL_H_

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/supervisor.h"
#include "grpcpp/grpcpp.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "sim/fault/fault_control.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

extern char** environ;

namespace peregrine::diagtest {

namespace v1 = ::peregrine::v1;

using ::peregrine::testing::TempDir;

// Answers every Register with the ack configured for that pod; records command results.
class FakeController final : public v1::AgentService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    std::string pod;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (message.has_register_()) {
        pod = message.register_().pod_name();
        streams_[pod] = stream;
        v1::ControllerMessage reply;
        auto it = acks_.find(pod);
        if (it != acks_.end()) {
          *reply.mutable_register_ack() = it->second;
        } else {
          reply.mutable_register_ack()->set_controller_id("fake");
          reply.mutable_register_ack()->set_heartbeat_interval_ms(200);
          reply.mutable_register_ack()->set_role(v1::AGENT_ROLE_STANDBY);
        }
        stream->Write(reply);
      }
      if (message.has_command_result()) results_.push_back(message.command_result());
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!pod.empty() && streams_[pod] == stream) streams_.erase(pod);
    return grpc::Status::OK;
  }

  void SetAck(const std::string& pod, v1::RegisterAck ack) {
    std::lock_guard<std::mutex> lock(mu_);
    acks_[pod] = std::move(ack);
  }

  bool WaitRegistered(const std::string& pod, int seconds = 60) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return streams_.count(pod) > 0; });
  }

  bool Send(const std::string& pod, const v1::Command& command) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(pod);
    if (it == streams_.end()) return false;
    v1::ControllerMessage message;
    *message.mutable_command() = command;
    return it->second->Write(message);
  }

  // The `nth` (0-based) result for command `id`, waiting for it (generous limit).
  std::optional<v1::CommandResult> WaitResult(const std::string& id, int nth = 0, int seconds = 240) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<v1::CommandResult> found;
    cv_.wait_for(lock, std::chrono::seconds(seconds), [&] {
      int seen = 0;
      for (const auto& r : results_) {
        if (r.command_id() == id && seen++ == nth) {
          found = r;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  int ResultCount(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& r : results_) n += r.command_id() == id ? 1 : 0;
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>*> streams_;
  std::map<std::string, v1::RegisterAck> acks_;
  std::vector<v1::CommandResult> results_;
};

// Stand-in GPU faults with one symptom each (sim/fault/fault_table.h).
inline sim::RankFault HungGpu() {
  sim::RankFault f;
  f.hang = true;
  return f;
}
inline sim::RankFault NanGpu() {
  sim::RankFault f;
  f.nan = true;
  return f;
}
inline sim::RankFault CorruptGpu() {
  sim::RankFault f;
  f.corrupt = true;
  return f;
}

// The fake controller's server plus real agent processes ("pod-<machine>", machine id
// "<machine>") started by one Supervisor and pumped by a thread.
class AgentCluster {
 public:
  explicit AgentCluster(const std::string& dir) : dir_(dir) {
    faults_ = dir + "/faults";
    REQUIRE(sim::CreateFaultTable(faults_).ok());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&controller_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(port_ > 0);
  }

  ~AgentCluster() {
    stop_ = true;
    if (pump_.joinable()) pump_.join();
    for (auto& s : supervisors_) s->BeginStop(absl::Seconds(5), absl::Now());
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      bool idle = true;
      for (auto& s : supervisors_) {
        s->Poll(absl::Now(), false);
        idle = idle && s->Idle();
      }
      if (idle) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto& s : supervisors_) s->KillAllAndWait();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
  }

  FakeController& controller() { return controller_; }
  const std::string& faults() const { return faults_; }
  // Puts `fault` on GPU `gpu` (-1: every GPU) of machine `machine` in the fault table.
  void InjectRankFault(int machine, int gpu, const sim::RankFault& fault) {
    REQUIRE(sim::SetRankFault(faults_, machine, gpu, fault).ok());
  }

  // Starts one agent per machine id (integers, as the fault table keys them), once per
  // cluster (one Supervisor reaps them all); `env_by_machine` overrides an agent's
  // environment (e.g. PATH with a fake dcgmi).
  void StartAgents(const std::vector<int>& machines,
                   const std::map<int, std::map<std::string, std::string>>& env_by_machine = {}) {
    REQUIRE(supervisors_.empty());
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      const size_t eq = entry.find('=');
      if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    env["PEREGRINE_SIM_FAULTS"] = faults_;
    env["PEREGRINE_STANDIN_DEVICE"] = std::string(PEREGRINE_BINARY_DIR) + "/lib/sim/libperegrine_sim_device.so";
    env["PATH"] = std::string(PEREGRINE_BINARY_DIR) + "/bin:" + env["PATH"];
    std::vector<ProcessSpec> specs;
    for (int m : machines) {
      std::map<std::string, std::string> agent_env = env;
      if (auto it = env_by_machine.find(m); it != env_by_machine.end()) {
        for (const auto& [k, v] : it->second) agent_env[k] = v;
      }
      std::vector<std::string> flat;
      for (const auto& [k, v] : agent_env) flat.push_back(k + "=" + v);
      ProcessSpec spec;
      spec.global_rank = m;
      spec.argv = {std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent",
                   "--controller", "127.0.0.1:" + std::to_string(port_), "--job", "team/diag",
                   "--pod", Pod(m), "--machine-id", std::to_string(m), "--heartbeat-ms", "200",
                   "--log-dir", dir_ + "/logs-" + std::to_string(m), "--grace-ms", "3000"};
      spec.env = flat;
      specs.push_back(spec);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      supervisors_.push_back(std::make_unique<Supervisor>());
      REQUIRE(supervisors_.back()->Start(specs).ok());
    }
    if (!pump_.joinable()) {
      pump_ = std::thread([this] {
        while (!stop_) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            for (auto& s : supervisors_) {
              PollResult r = s->Poll(absl::Now(), false);
              for (auto& line : r.lines) {
                if (std::getenv("PEREGRINE_TEST_VERBOSE") != nullptr) {
                  std::fprintf(stderr, "agent %d: %s\n", line.global_rank, line.text.c_str());
                }
              }
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
    }
    for (int m : machines) REQUIRE(controller_.WaitRegistered(Pod(m)));
  }

  static std::string Pod(int machine) { return "pod-" + std::to_string(machine); }

  // Sends RunDiagnostic `id` to the agent of `machine` and waits for its result.
  v1::CommandResult Run(int machine, const std::string& id, const std::string& kind,
                        const std::map<std::string, std::string>& params = {}, uint32_t timeout_ms = 0) {
    REQUIRE(controller_.Send(Pod(machine), Command(id, kind, params, timeout_ms)));
    std::optional<v1::CommandResult> r = controller_.WaitResult(id);
    REQUIRE(r.has_value());
    return *r;
  }

  // Sends `kind` to every machine at once (params per machine) and waits for every result;
  // results by machine.
  std::map<int, v1::CommandResult> RunAll(const std::string& id, const std::string& kind,
                                          const std::map<int, std::map<std::string, std::string>>& params,
                                          uint32_t timeout_ms = 0) {
    for (const auto& [m, p] : params) {
      REQUIRE(controller_.Send(Pod(m), Command(id + "-" + std::to_string(m), kind, p, timeout_ms)));
    }
    std::map<int, v1::CommandResult> out;
    for (const auto& [m, p] : params) {
      std::optional<v1::CommandResult> r = controller_.WaitResult(id + "-" + std::to_string(m));
      REQUIRE(r.has_value());
      out[m] = *r;
    }
    return out;
  }

  static v1::Command Command(const std::string& id, const std::string& kind,
                             const std::map<std::string, std::string>& params, uint32_t timeout_ms) {
    v1::Command c;
    c.set_id(id);
    c.mutable_run_diagnostic()->set_kind(kind);
    for (const auto& [k, v] : params) (*c.mutable_run_diagnostic()->mutable_params())[k] = v;
    c.mutable_run_diagnostic()->set_timeout_ms(timeout_ms);
    return c;
  }

 private:
  std::string dir_;
  std::string faults_;
  FakeController controller_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Supervisor>> supervisors_;  // at most one (StartAgents once)
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

// An ACTIVE RegisterAck whose assignment (attempt 0: nothing starts) puts `machine` in slot
// `machine_index` of a job of `machines` x `gpus` running `command`.
inline v1::RegisterAck ActiveAckHolding(int machine_index, int machines, int gpus,
                                        const std::vector<std::string>& command) {
  v1::RegisterAck ack;
  ack.set_controller_id("fake");
  ack.set_heartbeat_interval_ms(200);
  ack.set_role(v1::AGENT_ROLE_ACTIVE);
  v1::Assignment* a = ack.mutable_assignment();
  a->set_machine_index(static_cast<uint32_t>(machine_index));
  a->set_world_size(static_cast<uint32_t>(machines * gpus));
  a->mutable_layout()->set_tensor(static_cast<uint32_t>(gpus));
  a->mutable_layout()->set_pipeline(1);
  a->mutable_layout()->set_data(static_cast<uint32_t>(machines));
  a->mutable_layout()->set_gpus_per_machine(static_cast<uint32_t>(gpus));
  a->set_master_addr("127.0.0.1");
  a->set_master_port(1);
  a->set_attempt(0);
  for (const std::string& arg : command) a->mutable_code()->add_command(arg);
  for (int g = 0; g < gpus; ++g) {
    v1::RankInfo* r = a->add_ranks();
    r->set_global_rank(static_cast<uint32_t>(machine_index * gpus + g));
    r->set_local_rank(static_cast<uint32_t>(g));
    r->set_tp(static_cast<uint32_t>(g));
    r->set_dp(static_cast<uint32_t>(machine_index));
  }
  return ack;
}

// The ranks of a result, sorted.
inline std::vector<uint32_t> FailedRanks(const v1::DiagnosticResult& r) {
  std::vector<uint32_t> out(r.failed_ranks().begin(), r.failed_ranks().end());
  std::sort(out.begin(), out.end());
  return out;
}

// Agents of `machines` on a stand-in cluster in a fresh directory; every process the test
// started is killed and reaped when it goes (the guard is built first and goes last).
struct RunningAgents {
  explicit RunningAgents(const std::vector<int>& machines) : cluster(dir.path()) { cluster.StartAgents(machines); }

  ::peregrine::testing::DescendantGuard guard;
  TempDir dir;
  AgentCluster cluster;
};

}  // namespace peregrine::diagtest

#endif  // PEREGRINE_TESTS_AGENT_DIAGNOSTICS_DIAGNOSTICS_TEST_UTIL_H_
