// Recovery policy pieces the decision engine (decision_engine.h) composes: pure functions
// over observations and status, each answering one question of ByteRobust's automated
// fault-tolerance ladder (docs/architecture.md):
//   - is a machine at fault by its own inspections (fatal Xid, GPU lost, ECC / row-remap
//     failure, disk)?
//   - which network alarms are new, and how many fell on one machine within the window?
//   - did a training process die of a user-code error (a Python traceback ending in
//     TypeError, IndexError, ...)?
//   - which code version does a rollback go back to?
// No clocks, I/O or randomness. Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_RECOVERY_POLICY_H_
#define PEREGRINE_CONTROLLER_CORE_RECOVERY_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "controller/core/job_state.h"

namespace peregrine {

// The first machine-attributed FAULT among the agent's latest inspections and alarms, as
// "kind/component: summary"; nullopt when none. WARNINGs and non-attributed faults (a
// full data volume, a NIC) never count.
std::optional<std::string> MachineAttributedFault(const AgentObservation& agent);

// True for an alarm the network policy counts: kind "network" or "rdma", WARNING or FAULT.
bool IsNetworkAlarm(const InspectionObservation& alarm);

// Adds the agent's network alarms that `history` does not hold yet (same machine and
// time) and returns how many were new. Keeps at most `max_records`, dropping the oldest.
int RecordNetworkAlarms(const std::string& machine_id, const AgentObservation& agent, size_t max_records,
                        std::vector<NetworkAlarmRecord>* history);

// Alarms of `machine_id` in `history` with at > now - window_ns.
int NetworkAlarmsWithin(const std::vector<NetworkAlarmRecord>& history, const std::string& machine_id, int64_t now,
                        int64_t window_ns);

// Recognises a user-code error in a process's last output lines (oldest first). A
// Python traceback is a "Traceback (most recent call last):" header and/or indented
// `File "...", line N` frame lines, ended by the first unindented line, the exception
// line "<Error>: ..." or "<Error>" (optionally module-qualified). The header is not
// required: a SyntaxError in the main script prints none, and a deep traceback's header
// falls out of the tail. torchrun's "[rankN]: " line prefixes are ignored. The LAST
// traceback decides (a chained exception ends with the one that killed the process),
// except a launcher's wrapper (torchrun's ChildFailedError), which defers to the
// traceback before it (the rank's own error). It is a user-code error when that
// exception is one of TypeError, IndexError, AttributeError, ImportError,
// ModuleNotFoundError, SyntaxError, IndentationError, TabError, NameError,
// UnboundLocalError, KeyError, ValueError: the exception line is returned. nullopt
// otherwise (another exception such as a RuntimeError from NCCL, a crash in native code,
// an OOM kill, no traceback).
std::optional<std::string> UserCodeError(const std::vector<std::string>& last_log_lines);

// The version a rollback restores: the newest entry before the last one (the current
// version) whose outcome is "Healthy" and whose code differs from the current code;
// failing that, the newest earlier entry with different code that was not itself rolled
// back or failed. nullopt when there is none (nothing to roll back to).
std::optional<CodeVersionSpec> RollbackTarget(const std::vector<VersionRecord>& history);

// True when `code` was rolled back or failed before (a desired version equal to it is not
// applied again until the spec changes to something else).
bool WasRejected(const std::vector<VersionRecord>& history, const CodeVersionSpec& code);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_RECOVERY_POLICY_H_
