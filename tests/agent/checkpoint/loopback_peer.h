// LoopbackPeer: one agent's side of the checkpoint data channel for the data-channel
// tests: its ShardStore under a test directory (with an unlimited system budget) and a
// real PeerServer on 127.0.0.1 (a free port) that takes only calls carrying `token`.
// The peer owns both; the server, declared last, stops before the store goes. Its
// constructor REQUIREs that both start (Catch2: use inside a TEST_CASE). `token` may be
// changed at any time (DataToken is thread-safe), the rest as ShardStore and PeerServer allow.
#ifndef PEREGRINE_TESTS_AGENT_CHECKPOINT_LOOPBACK_PEER_H_
#define PEREGRINE_TESTS_AGENT_CHECKPOINT_LOOPBACK_PEER_H_

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/data_token.h"
#include "agent/checkpoint/peer_service.h"
#include "agent/checkpoint/shard_store.h"
#include "peregrine/v1/checkpoint.pb.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::testing {

struct LoopbackPeer {
  // The store of pod `pod` of job `job_namespace`/`job_name`, rooted at `dir`.
  LoopbackPeer(const TempDir& dir, const std::string& job_namespace, const std::string& job_name,
               const std::string& pod, std::string data_token)
      : token(std::move(data_token)) {
    checkpoint::ShardStoreOptions options;
    options.root = dir.path();
    options.job_namespace = job_namespace;
    options.job_name = job_name;
    options.pod_name = pod;
    options.system_limits = [] { return checkpoint::BudgetInputs{1ull << 34, 0, 0, 0}; };
    auto created = checkpoint::ShardStore::Create(options);
    REQUIRE(created.ok());
    store = std::move(*created);
    checkpoint::PeerServerOptions server_options;
    server_options.bind = "127.0.0.1";
    server_options.token = &token;
    server_options.store = store.get();
    auto started = checkpoint::PeerServer::Start(server_options);
    REQUIRE(started.ok());
    server = std::move(*started);
  }
  // host:port of the data channel.
  std::string address() const { return absl::StrCat("127.0.0.1:", server->port()); }

  checkpoint::DataToken token;
  std::unique_ptr<checkpoint::ShardStore> store;
  std::unique_ptr<checkpoint::PeerServer> server;
};

// The key of rank `rank`'s shard of step `step`, stored by slot `slot`.
inline v1::ShardKey ShardKeyOf(uint32_t slot, uint32_t rank, uint64_t step) {
  v1::ShardKey key;
  key.set_slot(slot);
  key.set_global_rank(rank);
  key.set_step(step);
  return key;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_CHECKPOINT_LOOPBACK_PEER_H_
