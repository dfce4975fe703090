// AgentService: the gRPC edge of the controller (peregrine.v1.AgentService.Connect).
//
// One callback-API reactor per agent stream: no thread per agent, so one core holds
// thousands of agents. The first message must be Register (validated by the registry;
// a bad one ends that stream with the registry's status code mapped one-to-one onto
// grpc::StatusCode); later malformed messages get a Reject and the stream stays open.
// Nothing an agent sends can disturb another agent's stream.
//
// Thread-safe. The service must outlive the grpc::Server it is registered with.
#ifndef PEREGRINE_CONTROLLER_AGENT_SERVICE_H_
#define PEREGRINE_CONTROLLER_AGENT_SERVICE_H_

#include <functional>
#include <memory>

#include "base/clock.h"
#include "controller/agent_registry.h"
#include "peregrine/v1/agent.grpc.pb.h"

namespace peregrine {

class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  // `clock` (which must outlive the service) gives the time of every agent message.
  AgentServiceImpl(AgentRegistry* registry, Clock* clock);

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  AgentRegistry* registry_;
  Clock* clock_;
};

// absl::StatusCode and grpc::StatusCode share numbering; this keeps the mapping explicit.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_SERVICE_H_
