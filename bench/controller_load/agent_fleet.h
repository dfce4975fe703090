// AgentFleet: thousands of simulated peregrine agents in one process, each holding a real
// gRPC stream (peregrine.v1.AgentService.Connect) to a controller, speaking the protocol
// the way peregrine-agent does (agent/agent.cc, agent/controller_link.cc):
//   - registers with the pod's bootstrap token (a projected service-account token the
//     controller checks with a TokenReview), then with the credential its RegisterAck
//     carried; re-registers after a broken stream, with the assignment it holds and the
//     command ids it executed;
//   - after each ack, and then every heartbeat_interval_ms the ack names, a Heartbeat:
//     TrainingState with one ProcessState per rank, one IterationSummary per rank (the
//     step the simulated training reached: one step per `step_time` since the attempt
//     began at its resume step) and the four inspections' latest results;
//   - answers every Command with a CommandResult; RestartInPlace and Activate begin the
//     assignment's attempt, Stop ends training.
// No thread per agent: streams use the gRPC callback API (its own small thread pool runs
// the reactions) and `ticker_threads` threads send the heartbeats and (re)connect, each
// owning a share of the agents in a time-ordered queue. With streams_per_connection 1
// every agent has its own channel and TCP connection, as separate machines do.
//
// Thread-safe: every method may be called from any thread. Shutdown() (also run by the
// destructor) stops the tickers, cancels every stream, waits until every stream is
// destroyed and then releases the channels on the calling thread, so nothing outlives
// the fleet and no channel is released on one of gRPC's callback threads.
#ifndef PEREGRINE_BENCH_CONTROLLER_LOAD_AGENT_FLEET_H_
#define PEREGRINE_BENCH_CONTROLLER_LOAD_AGENT_FLEET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace peregrine::loadtest {

struct AgentFleetOptions {
  std::string target;                          // the controller's gRPC host:port
  int ticker_threads = 2;
  int streams_per_connection = 1;              // agents sharing one channel (1: none)
  absl::Duration step_time = absl::Seconds(1); // the simulated training's iteration time
  absl::Duration connect_spread = absl::Seconds(1);  // first connects spread over this
  // Reconnects wait as peregrine-agent's do (ReconnectBackoff in agent/controller_link.h):
  // jittered exponential backoff from the initial to the max wait, reset by an ack.
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  uint64_t seed = 1;
};

// One simulated machine: the pod's identity and its bootstrap token.
struct SimulatedAgentParams {
  std::string job_namespace, job_name, pod, machine_id;
  std::string bootstrap_token;
  bool standby = false;
};

// One agent as the fleet sees it now.
struct AgentSnapshot {
  std::string pod;
  bool stopped = false;     // removed or killed: its stream is ended for good
  bool connected = false;   // its current stream got a RegisterAck
  bool active = false;      // holds a slot (registered active or activated)
  uint64_t attempt = 0;     // the attempt it trains (0: none yet)
  uint64_t step = 0;        // the last step its ranks completed
};

struct FleetCounts {
  int agents = 0;        // added and not removed
  int connected = 0;     // of those, acknowledged on their current stream
  int open_streams = 0;  // streams not yet destroyed (all agents, removed ones too)
  uint64_t heartbeats = 0, commands = 0, rejects = 0;
  uint64_t streams_started = 0, streams_failed = 0;  // failed: ended by the controller or an error
  uint64_t dropped_heartbeats = 0;  // superseded while the stream's writes were backed up
};

class AgentFleet {
 public:
  explicit AgentFleet(AgentFleetOptions options);
  ~AgentFleet();
  AgentFleet(const AgentFleet&) = delete;
  AgentFleet& operator=(const AgentFleet&) = delete;

  // Starts an agent (its first connect within connect_spread). kAlreadyExists for a pod
  // that has a live agent; kFailedPrecondition after Shutdown.
  absl::Status Add(SimulatedAgentParams params);
  // The pod is gone (deleted, or its machine lost): its stream is cancelled and it never
  // reconnects. False when the fleet has no live agent for it.
  bool Remove(const std::string& pod);
  void Shutdown();

  FleetCounts Counts() const;
  std::vector<AgentSnapshot> Snapshot() const;

  class Impl;  // agent_fleet.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::loadtest

#endif  // PEREGRINE_BENCH_CONTROLLER_LOAD_AGENT_FLEET_H_
