// Command-line flags of peregrine-agent -> AgentOptions.
//
// Flags (each also read from the environment variable in brackets; a flag on
// the command line wins over the variable):
//   --controller HOST:PORT [PEREGRINE_CONTROLLER]   required
//   --job NAMESPACE/NAME   [PEREGRINE_JOB]          required
//   --pod NAME             [PEREGRINE_POD]          required
//   --machine-id ID        [PEREGRINE_MACHINE_ID]   default: the pod name
//   --role active|standby  [PEREGRINE_ROLE]         default: active
//   --credential-file PATH [PEREGRINE_CREDENTIAL_FILE] the first bearer token for the
//                          controller (credential or bootstrap token); read and removed
//                          at start, the acked credential then kept in memory only
//   --tls-ca PATH          [PEREGRINE_TLS_CA]
//   --log-dir DIR          [PEREGRINE_LOG_DIR]
//   --nccl-hook PATH       [PEREGRINE_NCCL_HOOK]    libperegrine_nccl.so to preload
//   --heartbeat-ms N       [PEREGRINE_HEARTBEAT_MS] default 1000
//   --grace-ms N           [PEREGRINE_GRACE_MS]     default 10000
//   --kmsg-path PATH       [PEREGRINE_KMSG_PATH]    default /dev/kmsg
//   --sysfs-root DIR       [PEREGRINE_SYSFS_ROOT]   default /sys
//   --host-inspections pod|node [PEREGRINE_HOST_INSPECTIONS] default pod: the agent runs
//                          every machine inspection; node: the node inspector DaemonSet
//                          runs the kernel-log, NIC/RDMA and GPU/DCGM ones, the agent only
//                          the volume (host) inspection
//   --sim-machine-root DIR [PEREGRINE_SIM_MACHINE_ROOT] local mode: the stand-in machine's
//                          kmsg and sysfs are DIR/<machine-id>/{kmsg,sys} unless given
//   --diagnose-bin PATH    [PEREGRINE_DIAGNOSE_BIN] peregrine-diagnose (default: next to the agent)
//   --gpus-per-machine N   [PEREGRINE_GPUS_PER_MACHINE] GPUs when no assignment says (standby)
//   --checkpoint-root DIR  [PEREGRINE_CHECKPOINT_ROOT] default /dev/shm/peregrine; "off": no
//                          checkpoint store or data channel
//   --data-port N          [PEREGRINE_DATA_PORT]    the CheckpointPeer port (0: a free one)
//   --data-bind ADDR       [PEREGRINE_DATA_BIND]    default 0.0.0.0
//   --data-advertise HOST  [PEREGRINE_DATA_ADVERTISE] host in Register.data_address (default:
//                          the hostname)
//   --client-dir DIR       [PEREGRINE_CLIENT_DIR]   lib/libperegrine_client.so and python/peregrine/
//                          (default: the parent of the agent binary's directory)
//   --help
// Both "--flag value" and "--flag=value" are accepted.
//
// Pure: the environment is passed in as a lookup function. Thread-compatible.
#ifndef PEREGRINE_AGENT_AGENT_FLAGS_H_
#define PEREGRINE_AGENT_AGENT_FLAGS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent.h"

namespace peregrine {

struct ParsedAgentFlags {
  bool help = false;  // --help was given; options are not filled in
  AgentOptions options;
};

using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// `args` excludes argv[0]. InvalidArgument naming the flag (or variable) for
// an unknown flag, a missing value, a bad number or role, or a missing
// required flag.
absl::StatusOr<ParsedAgentFlags> ParseAgentFlags(const std::vector<std::string>& args, const EnvLookup& env);

// The --help text.
std::string AgentUsage();

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_AGENT_FLAGS_H_
