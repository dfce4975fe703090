// The agent's writes to the controller: the outbox's drop policy (unit) and a real
// ControllerLink whose stream goes through a blackholed TcpProxy (integration): Send()
// returns while the controller reads nothing, and what must not be dropped arrives in
// order after the heal.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/controller_link.h"
#include "agent/outbox.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/tcp_proxy.h"

namespace peregrine {
namespace {

using testing::Eventually;

v1::AgentMessage Heartbeat(int64_t n, size_t padding = 0) {
  v1::AgentMessage message;
  message.mutable_heartbeat()->set_sent_at(n);
  if (padding > 0) message.mutable_heartbeat()->add_inspections()->set_summary(std::string(padding, 'x'));
  return message;
}

v1::AgentMessage Result(const std::string& id) {
  v1::AgentMessage message;
  message.mutable_command_result()->set_command_id(id);
  return message;
}

v1::AgentMessage LogEvent(const std::string& text) {
  v1::AgentMessage message;
  message.mutable_event()->set_log(text);
  return message;
}

// What an outbox holds, oldest first: "hb<n>", "r:<id>", "ev:<log>", "reg".
std::vector<std::string> Drain(ControllerOutbox& outbox) {
  std::vector<std::string> out;
  while (std::optional<v1::AgentMessage> m = outbox.Pop()) {
    if (m->has_heartbeat()) out.push_back(absl::StrCat("hb", m->heartbeat().sent_at()));
    if (m->has_command_result()) out.push_back("r:" + m->command_result().command_id());
    if (m->has_event()) out.push_back("ev:" + m->event().log());
    if (m->has_register_()) out.push_back("reg");
  }
  return out;
}

TEST_CASE("the outbox drops the oldest heartbeats over its message limit and keeps everything else", "[unit]") {
  ControllerOutbox outbox(OutboxLimits{3, size_t{1} << 20});
  v1::AgentMessage reg;
  reg.mutable_register_()->set_pod_name("p");
  CHECK(outbox.Push(reg) == 0);
  CHECK(outbox.Push(Heartbeat(1)) == 0);
  CHECK(outbox.Push(Result("a")) == 0);
  CHECK(outbox.Push(Heartbeat(2)) == 1);  // four: hb1 goes
  CHECK(outbox.Push(LogEvent("e")) == 1);  // hb2 goes
  CHECK(outbox.Push(Result("b")) == 0);   // nothing droppable left: over the limit, kept
  CHECK(outbox.Push(Heartbeat(3)) == 1);  // the new heartbeat is the only droppable one
  CHECK(outbox.size() == 4);
  CHECK(outbox.dropped() == 3);
  CHECK(Drain(outbox) == std::vector<std::string>{"reg", "r:a", "ev:e", "r:b"});
  CHECK(outbox.bytes() == 0);
}

TEST_CASE("the outbox keeps the newest heartbeats within its byte limit", "[unit]") {
  const size_t one = Heartbeat(1, 1000).ByteSizeLong();  // n = 1..10 encode alike
  ControllerOutbox outbox(OutboxLimits{100, 3 * one});
  for (int n = 1; n <= 10; ++n) outbox.Push(Heartbeat(n, 1000));
  CHECK(outbox.dropped() == 7);
  CHECK(outbox.bytes() == 3 * one);
  CHECK(outbox.Push(Result("x")) == 1);  // over the bytes: the oldest heartbeat makes room
  CHECK(Drain(outbox) == std::vector<std::string>{"hb9", "hb10", "r:x"});
}

TEST_CASE("the outbox hands back everything it holds, oldest first", "[unit]") {
  ControllerOutbox outbox(OutboxLimits{});
  outbox.Push(LogEvent("1"));
  outbox.Push(Heartbeat(1));
  outbox.Push(Result("2"));
  std::vector<v1::AgentMessage> all = outbox.TakeAll();
  REQUIRE(all.size() == 3);
  CHECK(all[0].event().log() == "1");
  CHECK(all[1].has_heartbeat());
  CHECK(all[2].command_result().command_id() == "2");
  CHECK(outbox.empty());
  CHECK(outbox.bytes() == 0);
  CHECK_FALSE(outbox.Pop().has_value());
  CHECK(OutboxDroppable(Heartbeat(1)));
  CHECK_FALSE(OutboxDroppable(Result("r")));
  CHECK_FALSE(OutboxDroppable(LogEvent("l")));
}

// A minimal real AgentService: records what every stream delivers, answers nothing.
class RecordingAgentService final : public v1::AgentService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(message);
    }
    return grpc::Status::OK;
  }

  std::vector<v1::AgentMessage> Received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::AgentMessage> received_;
};

struct LinkEvents {
  std::mutex mu;
  std::vector<uint64_t> opened;
  uint64_t Latest() {
    std::lock_guard<std::mutex> lock(mu);
    return opened.empty() ? 0 : opened.back();
  }
};

TEST_CASE("Send returns at once while the controller link is blackholed and the kept messages arrive in order after the heal", "[integration]") {
  RecordingAgentService service;
  int server_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  testing::TcpProxy proxy(server_port);

  LinkEvents events;
  ControllerLinkOptions options;
  options.target = absl::StrCat("127.0.0.1:", proxy.port());
  options.outbox = OutboxLimits{64, size_t{4} << 20};
  ControllerLink::Callbacks callbacks;
  callbacks.on_stream_open = [&](uint64_t session) {
    std::lock_guard<std::mutex> lock(events.mu);
    events.opened.push_back(session);
  };
  callbacks.on_message = [](uint64_t, v1::ControllerMessage) {};
  callbacks.on_stream_closed = [](uint64_t, absl::Status) {};
  {
    ControllerLink link(options, callbacks);
    link.Start();
    REQUIRE(Eventually([&] { return events.Latest() != 0; }));
    const uint64_t session = events.Latest();
    REQUIRE(link.Send(session, LogEvent("before")));
    REQUIRE(Eventually([&] { return service.Received().size() == 1; }));

    proxy.Blackhole();
    // 3000 heartbeats of 128 KiB (about 375 MiB, far beyond the socket buffers and HTTP/2
    // windows) with a command result after every 100th: a write that waited for the
    // network would never return while the proxy forwards nothing.
    constexpr int kSends = 3000;
    std::vector<std::string> kept;
    const v1::AgentMessage big = Heartbeat(0, 128 * 1024);
    for (int n = 1; n <= kSends; ++n) {
      v1::AgentMessage heartbeat = big;
      heartbeat.mutable_heartbeat()->set_sent_at(n);
      REQUIRE(link.Send(session, heartbeat));
      if (n % 100 == 0) {
        kept.push_back(absl::StrCat("result-", n));
        REQUIRE(link.Send(session, Result(kept.back())));
      }
    }
    CHECK(proxy.blackholed());
    CHECK(service.Received().size() == 1);  // nothing got through meanwhile
    CHECK(link.dropped_messages() > 0);
    CHECK(events.Latest() == session);  // the same stream: no reconnect hid the wait

    proxy.Heal();
    REQUIRE(Eventually([&] {
      std::vector<v1::AgentMessage> got = service.Received();
      return !got.empty() && got.back().command_result().command_id() == kept.back();
    }));
    std::vector<std::string> results;
    int64_t last_heartbeat = 0;
    bool heartbeats_in_order = true;
    for (const v1::AgentMessage& m : service.Received()) {
      if (m.has_command_result()) results.push_back(m.command_result().command_id());
      if (m.has_heartbeat()) {
        heartbeats_in_order = heartbeats_in_order && m.heartbeat().sent_at() > last_heartbeat;
        last_heartbeat = m.heartbeat().sent_at();
      }
    }
    CHECK(results == kept);
    CHECK(heartbeats_in_order);
    CHECK(last_heartbeat == kSends);  // the newest heartbeat is never the one dropped
    CHECK(events.Latest() == session);
    CHECK(service.Received().front().event().log() == "before");
    link.Stop();
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
}

TEST_CASE("Send refuses a session that is not the live stream", "[integration]") {
  RecordingAgentService service;
  int server_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  LinkEvents events;
  ControllerLinkOptions options;
  options.target = absl::StrCat("127.0.0.1:", server_port);
  ControllerLink::Callbacks callbacks;
  callbacks.on_stream_open = [&](uint64_t session) {
    std::lock_guard<std::mutex> lock(events.mu);
    events.opened.push_back(session);
  };
  callbacks.on_message = [](uint64_t, v1::ControllerMessage) {};
  callbacks.on_stream_closed = [](uint64_t, absl::Status) {};
  {
    ControllerLink link(options, callbacks);
    CHECK_FALSE(link.Send(1, LogEvent("not started")));
    link.Start();
    REQUIRE(Eventually([&] { return events.Latest() != 0; }));
    CHECK_FALSE(link.Send(events.Latest() + 1, LogEvent("another session")));
    CHECK(link.Send(events.Latest(), LogEvent("live")));
    REQUIRE(Eventually([&] { return service.Received().size() == 1; }));
    CHECK(service.Received()[0].event().log() == "live");
    link.Stop();
    CHECK_FALSE(link.Send(events.Latest(), LogEvent("stopped")));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
}

// The first stream reads nothing until the test ends it (its writer stuck in a Write the
// controller's flow control holds); later streams record what they read.
class StallingAgentService final : public v1::AgentService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (streams_++ == 0) {
      cv_.wait(lock, [&] { return end_first_; });
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller going away");
    }
    lock.unlock();
    v1::AgentMessage message;
    while (stream->Read(&message)) {
      std::lock_guard<std::mutex> hold(mu_);
      received_.push_back(message);
    }
    return grpc::Status::OK;
  }

  void EndFirstStream() {
    std::lock_guard<std::mutex> lock(mu_);
    end_first_ = true;
    cv_.notify_all();
  }

  std::vector<std::string> ReceivedLogs() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> logs;
    for (const v1::AgentMessage& m : received_) {
      if (m.has_event()) logs.push_back(m.event().log());
    }
    return logs;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int streams_ = 0;
  bool end_first_ = false;
  std::vector<v1::AgentMessage> received_;
};

TEST_CASE("events a stream ends with are sent first once the next stream registers", "[integration]") {
  StallingAgentService service;
  int server_port = 0;
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(-1);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  LinkEvents events;
  ControllerLinkOptions options;
  options.target = absl::StrCat("127.0.0.1:", server_port);
  options.backoff_initial = absl::Milliseconds(10);
  ControllerLink::Callbacks callbacks;
  callbacks.on_stream_open = [&](uint64_t session) {
    std::lock_guard<std::mutex> lock(events.mu);
    events.opened.push_back(session);
  };
  callbacks.on_message = [](uint64_t, v1::ControllerMessage) {};
  callbacks.on_stream_closed = [](uint64_t, absl::Status) {};
  {
    ControllerLink link(options, callbacks);
    link.Start();
    REQUIRE(Eventually([&] { return events.Latest() != 0; }));
    const uint64_t first = events.Latest();
    // 64 MiB of command results (never dropped) ahead of the events, far over what the
    // HTTP/2 windows and the socket buffers take in: the writer is held before the events.
    for (int n = 0; n < 32; ++n) {
      v1::AgentMessage result = Result(absl::StrCat("r", n));
      result.mutable_command_result()->mutable_stacks()->add_processes()->set_raw(std::string(size_t{2} << 20, 's'));
      REQUIRE(link.Send(first, result));
    }
    std::vector<std::string> sent;
    for (int n = 1; n <= 50; ++n) {
      sent.push_back(absl::StrCat("e", n));
      REQUIRE(link.Send(first, LogEvent(sent.back())));
      REQUIRE(link.Send(first, Heartbeat(n + 1, 1000)));
    }
    service.EndFirstStream();
    REQUIRE(Eventually([&] { return events.Latest() > first; }));
    const uint64_t second = events.Latest();
    CHECK_FALSE(link.Send(first, LogEvent("stale")));
    link.MarkRegistered(second);
    sent.push_back("after");
    REQUIRE(link.Send(second, LogEvent("after")));
    const bool all = Eventually([&] { return service.ReceivedLogs().size() >= sent.size(); });
    INFO(absl::StrJoin(service.ReceivedLogs(), ","));
    REQUIRE(all);
    CHECK(service.ReceivedLogs() == sent);
    link.Stop();
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
}

}  // namespace
}  // namespace peregrine
