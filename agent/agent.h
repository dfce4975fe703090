// Agent: peregrine-agent, the training pod's entrypoint. It keeps one stream to
// the controller, converges training toward what the controller wants, runs its
// commands idempotently by id, reports progress, exits, inspections and fail-slow
// events, and never restarts training by itself (agent/agent.cc describes how).
// Threads: one control loop owns all state; public methods are thread-safe.
// Ownership: the Agent owns its threads and children; destroying it shuts down
// (as RequestShutdown) and joins. Errors: BuildAndStart's status.
#ifndef PEREGRINE_AGENT_AGENT_H_
#define PEREGRINE_AGENT_AGENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace peregrine {

enum class AgentRoleOption { kActive, kStandby };

struct AgentOptions {
  std::string controller;     // host:port of the controller's agent endpoint
  std::string job_namespace;
  std::string job_name;
  std::string pod_name;
  std::string machine_id;
  AgentRoleOption role = AgentRoleOption::kActive;
  // optional: read and removed at start (before any training process), the first bearer
  // token the agent presents to the controller (its credential, or a bootstrap token); the
  // credential the controller acks is kept in memory only (agent/controller_link.h).
  std::string credential_file;
  std::string tls_ca_file;    // optional: TLS with this CA bundle
  std::string log_dir;        // optional: per-rank logs rank-<N>.log
  // optional: libperegrine_nccl.so; when set, training processes run with it preloaded
  // and a FailSlowMonitor reads their NCCL rings and reports fail-slow events. Rings
  // live in $PEREGRINE_NCCL_RING_DIR when set, else /dev/shm/peregrine-nccl-<pod>-<pid>
  // (removed on exit; dead agents' directories are swept), else <log_dir>/nccl-rings
  // (or /tmp/peregrine-nccl-<pod> without a log dir) where there is no /dev/shm.
  std::string nccl_hook;
  uint32_t heartbeat_ms = 1000;
  uint32_t grace_ms = 10000;  // SIGTERM -> SIGKILL on agent shutdown
  bool handle_signals = false;  // install SIGTERM/SIGINT handlers (the binary does)
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  std::string agent_version = "0.1.0";
  // Machine inspections (agent/inspection_runner.h): where the kernel log and sysfs are.
  std::string kmsg_path = "/dev/kmsg";
  std::string sysfs_root = "/sys";
  // Local mode: the stand-in machine's files live in <sim_machine_root>/<machine_id>/
  // (created at start; kmsg_path and sysfs_root point there). Empty: a real machine.
  std::string sim_machine_root;
  bool inspections = true;  // run the machine inspections and report them
  // The node inspector (a DaemonSet, helm value nodeInspector.enabled) runs the kernel-log,
  // NIC/RDMA and GPU/DCGM inspections of this node: the agent then runs only the job's
  // volume (host) inspection (--host-inspections node).
  bool host_inspections_on_node = false;
  // Stop-time diagnostics (agent/diagnostics/README.md): the peregrine-diagnose helper
  // (default: next to this binary) and the machine's GPU count when no assignment says it
  // (standbys; 0: the param "gpus", else 1).
  std::string diagnose_binary;
  int gpus_per_machine = 0;
  // In-memory checkpoints (agent/checkpoint/): the store's root (its area is
  // <root>/<namespace>.<job>/<pod>/; "off" or empty: no store and no data channel), the
  // CheckpointPeer data channel's port (0: a free one), bind address and advertised host
  // (empty: this machine's hostname), and the client dir holding
  // lib/libperegrine_client.so and python/peregrine/ (empty: the parent of this binary's
  // directory, the build tree's layout).
  std::string checkpoint_root = "/dev/shm/peregrine";
  int data_port = 0;
  std::string data_bind = "0.0.0.0";
  std::string data_advertise;
  std::string client_dir;
  // The time of everything the agent does: its loop, heartbeats, events, supervisor
  // deadlines, diagnostics and reconnect backoff. Must outlive the agent.
  Clock* clock = RealClock();
};

class Agent {
 public:
  // InvalidArgument naming the option when a required one is missing.
  static absl::StatusOr<std::unique_ptr<Agent>> BuildAndStart(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Begins the shutdown sequence (as SIGTERM would). Returns at once.
  void RequestShutdown();
  // Blocks until the agent has shut down; returns the process exit code.
  int Wait();

  class Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_AGENT_H_
