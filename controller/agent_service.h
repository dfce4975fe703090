// AgentService: the gRPC edge of the controller (peregrine.v1.AgentService.Connect).
//
// One callback-API reactor per agent stream: no thread per agent, so one core holds
// thousands of agents. The first message must be Register (validated by the registry;
// a bad one ends that stream with the registry's status code mapped one-to-one onto
// grpc::StatusCode) and must arrive within `register_timeout` or the stream ends with
// DEADLINE_EXCEEDED; later malformed messages get a Reject and the stream stays open.
// The bearer token of the call's "authorization" metadata is the agent's credential or
// bootstrap token (agent_credentials.h). Nothing an agent sends can disturb another
// agent's stream, save a newer registration of the same pod, which replaces it.
//
// Thread-safe. The service must outlive the grpc::Server it is registered with.
#ifndef PEREGRINE_CONTROLLER_AGENT_SERVICE_H_
#define PEREGRINE_CONTROLLER_AGENT_SERVICE_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "peregrine/v1/agent.grpc.pb.h"

namespace peregrine {

// A stream that has not sent Register this long after it opened is closed.
inline constexpr absl::Duration kAgentRegisterTimeout = absl::Seconds(10);

struct AgentServiceOptions {
  absl::Duration register_timeout = kAgentRegisterTimeout;
};

class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  // `clock` (which must outlive the service) gives the time of every agent message.
  AgentServiceImpl(AgentRegistry* registry, Clock* clock, AgentServiceOptions options = {});

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  AgentRegistry* registry_;
  Clock* clock_;
  AgentServiceOptions options_;
};

// The agent server's HTTP/2 keepalive: a ping every 30 s on an idle connection, closed
// when unanswered for 10 s (so a vanished agent's stream ends even without a TCP reset),
// pings allowed without calls, and agents' own pings accepted down to every 10 s. Call on
// the builder that serves AgentServiceImpl.
void ApplyAgentServerKeepalive(grpc::ServerBuilder* builder);

// absl::StatusCode and grpc::StatusCode share numbering; this keeps the mapping explicit.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_SERVICE_H_
