// The agent's one translation edge between peregrine.v1 wire types and its own
// plain values: assignments, commands, the desired state of a RegisterAck, the
// phase and role it reports, command outcomes, captured stacks, progress and
// process exits. Pure functions; thread-safe. Unknown wire values map to a
// documented default (an unknown command kind to AgentCommand::Kind::kUnknown).
#ifndef PEREGRINE_AGENT_PROTO_TRANSLATION_H_
#define PEREGRINE_AGENT_PROTO_TRANSLATION_H_

#include <cstddef>
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

// The most bytes a serialised StackCapture reply may have: under gRPC's default 4 MiB
// message limit with room for the rest of the AgentMessage.
inline constexpr size_t kMaxStackReplyBytes = (4 << 20) - (64 << 10);

// Captured stacks with their frames parsed (text that does not parse keeps only
// the raw text; the controller then counts the rank as not captured), in at most
// `max_bytes` serialised. Over it, every process gets a fair share (the smaller ones keep
// everything): a process over its share loses its parsed frames, then its text is cut
// ("... truncated N bytes"); processes that still do not fit are left out from the end
// and the last one kept says how many ("... N more processes not captured: the reply
// is full").
peregrine::v1::StackCapture StacksToProto(const std::vector<CapturedStack>& stacks,
                                          size_t max_bytes = kMaxStackReplyBytes);
void FillIterationSummary(int global_rank, const ProgressWindow& window, peregrine::v1::IterationSummary* out);
void FillProcessState(const ProcessStatus& process, peregrine::v1::ProcessState* out);
// All but last_completed_step, which comes from the rank's progress.
void FillProcessExit(const ProcessExitReport& exit, uint64_t attempt, peregrine::v1::ProcessExit* out);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_PROTO_TRANSLATION_H_
