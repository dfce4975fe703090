#include "tests/testing/loopback_agent_service.h"

#include <chrono>
#include <string>

#include <catch2/catch.hpp>

namespace peregrine::testing {

LoopbackAgentService::LoopbackAgentService(Clock* clock)
    : service_(&registry_, clock != nullptr ? clock : &own_clock_) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  REQUIRE(server_ != nullptr);
}

LoopbackAgentService::~LoopbackAgentService() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

std::shared_ptr<grpc::Channel> LoopbackAgentService::Channel() const {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
}

}  // namespace peregrine::testing
