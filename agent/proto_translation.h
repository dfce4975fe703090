// The agent's one translation edge between peregrine.v1 wire types and its own
// plain values: assignments, commands, the desired state of a RegisterAck, the
// phase and role it reports, command outcomes, captured stacks, progress and
// process exits. Pure functions; thread-safe. Unknown wire values map to a
// documented default (an unknown command kind to AgentCommand::Kind::kUnknown).
#ifndef PEREGRINE_AGENT_PROTO_TRANSLATION_H_
#define PEREGRINE_AGENT_PROTO_TRANSLATION_H_

#include <vector>

#include "agent/command_state.h"
#include "agent/progress_parser.h"
#include "agent/stack_capture.h"
#include "agent/supervisor.h"
#include "agent/training_assignment.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

TrainingCode CodeFromProto(const peregrine::v1::CodeVersion& code);
peregrine::v1::CodeVersion CodeToProto(const TrainingCode& code);
TrainingAssignment AssignmentFromProto(const peregrine::v1::Assignment& assignment);
peregrine::v1::Assignment AssignmentToProto(const TrainingAssignment& assignment);

// A RegisterAck's role (nullopt for UNSPECIFIED) and assignment.
DesiredState DesiredStateFromProto(const peregrine::v1::RegisterAck& ack);
AgentCommand CommandFromProto(const peregrine::v1::Command& command);

peregrine::v1::AgentRole RoleToProto(AgentRole role);
peregrine::v1::TrainingPhase PhaseToProto(AgentPhase phase);
peregrine::v1::Status OutcomeToProto(const CommandOutcome& outcome);

// Captured stacks with their frames parsed (text that does not parse keeps only
// the raw text; the controller then counts the rank as not captured).
peregrine::v1::StackCapture StacksToProto(const std::vector<CapturedStack>& stacks);
void FillIterationSummary(int global_rank, const ProgressWindow& window, peregrine::v1::IterationSummary* out);
void FillProcessState(const ProcessStatus& process, peregrine::v1::ProcessState* out);
// All but last_completed_step, which comes from the rank's progress.
void FillProcessExit(const ProcessExitReport& exit, uint64_t attempt, peregrine::v1::ProcessExit* out);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_PROTO_TRANSLATION_H_
