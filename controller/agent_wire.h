// The controller's translation between the agent protocol (peregrine.v1) and the decision
// engine's plain types: assignments and commands to the wire, and what agents send
// (training state, inspections, checkpoint reports and events, command results) to
// observations. Pure functions of their arguments; no I/O, no state, thread-safe.
#ifndef PEREGRINE_CONTROLLER_AGENT_WIRE_H_
#define PEREGRINE_CONTROLLER_AGENT_WIRE_H_

#include <cstdint>
#include <map>
#include <string>

#include "controller/core/job_state.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

// Plain <-> wire translation of an assignment. The checkpoint plan's peers are slots;
// `data_addresses` (slot -> host:port the slot's agent registered) gives their addresses
// (a peer whose agent has not registered one is sent with an empty address).
v1::Assignment ToWire(const AssignmentSpec& a, const TrainingJobSpec& spec,
                      const std::map<int, std::string>& data_addresses = {});

// The plain forms of a CheckpointReport and a CheckpointEvent (`at`: the event's time).
CheckpointReportObservation CheckpointReportFromWire(const v1::CheckpointReport& r);
CheckpointEventObservation CheckpointEventFromWire(const v1::CheckpointEvent& e, int64_t at);

// The wire command for a plan's command (every CommandKind; `now` is issued_at).
v1::Command CommandToWire(const CommandToSend& c, const TrainingJobSpec& spec, int64_t now,
                          const std::map<int, std::string>& data_addresses = {});

// Plain forms of a CommandResult and its payloads. Stacks are grouped by global rank (-1
// for processes that are not a rank); each keeps the tool's raw text.
CommandResultObservation CommandResultFromWire(const v1::CommandResult& r);
DiagnosticOutcome DiagnosticFromWire(const v1::DiagnosticResult& d);
v1::DiagnosticResult DiagnosticToWire(const DiagnosticOutcome& d);

// The plain form of an inspection result or alarm (`at`: when it was observed).
InspectionObservation InspectionFromWire(const v1::InspectionResult& r, int64_t at);
// Applies a TrainingState to `obs`: attempt and phase, and per-process exits (which keep
// the log lines already attached to a rank's exit). A new attempt clears what belonged to
// the previous one (steps, exits, losses, fail-slow reports, profiles, iteration times).
void ApplyTrainingState(const v1::TrainingState& t, AgentObservation* obs);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_AGENT_WIRE_H_
