// A real AgentService (controller/agent_service.h) on loopback gRPC, for tests that speak
// peregrine.v1 to the controller as an agent does. It owns an AgentRegistry (controller id
// "test-controller"), the service and a grpc::Server on 127.0.0.1 at a port the kernel
// picks. Construction REQUIREs that the server starts; destruction shuts it down (2 s
// grace for open streams). The test binds jobs and desired agents through registry().
// Thread-safe as AgentRegistry and grpc::Server are; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_
#define PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"

namespace peregrine::testing {

class LoopbackAgentService {
 public:
  // `clock` (which must outlive this) gives the service its time; nullptr: a clock of its
  // own that stays at Unix time 1 s.
  explicit LoopbackAgentService(Clock* clock = nullptr);
  ~LoopbackAgentService();
  LoopbackAgentService(const LoopbackAgentService&) = delete;
  LoopbackAgentService& operator=(const LoopbackAgentService&) = delete;

  AgentRegistry& registry() { return registry_; }
  int port() const { return port_; }
  // A new insecure channel to the server.
  std::shared_ptr<grpc::Channel> Channel() const;

 private:
  ManualClock own_clock_{absl::FromUnixSeconds(1)};
  AgentRegistry registry_{"test-controller"};
  AgentServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_
