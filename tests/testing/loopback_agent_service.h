// A real AgentService (controller/agent_service.h) on loopback gRPC, for tests that speak
// peregrine.v1 to the controller as an agent does. It owns an AgentRegistry (controller id
// "test-controller"), the service and a grpc::Server on 127.0.0.1 at a port the kernel
// picks. Construction REQUIREs that the server starts; destruction shuts it down (2 s
// grace for open streams). The test binds jobs and desired agents through registry().
// Thread-safe as AgentRegistry and grpc::Server are; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_
#define PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "controller/agent_registry.h"
#include "controller/agent_service.h"

namespace peregrine::testing {

class LoopbackAgentService {
 public:
  // `now` is the service's clock (Unix nanoseconds); by default a fixed 1 s.
  explicit LoopbackAgentService(std::function<int64_t()> now = [] { return int64_t{1'000'000'000}; });
  ~LoopbackAgentService();
  LoopbackAgentService(const LoopbackAgentService&) = delete;
  LoopbackAgentService& operator=(const LoopbackAgentService&) = delete;

  AgentRegistry& registry() { return registry_; }
  int port() const { return port_; }
  // A new insecure channel to the server.
  std::shared_ptr<grpc::Channel> Channel() const;

 private:
  AgentRegistry registry_{"test-controller"};
  AgentServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_LOOPBACK_AGENT_SERVICE_H_
