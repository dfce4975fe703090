// The closed sets of values in job_state.h (states, verdicts, outcomes, kinds, tiers,
// statuses) as enum classes, and their one string form each. The strings are those of the
// persisted status (the CRD schema), the metrics labels and the events; they are produced
// and read only at those edges: ToString never fails, Parse* returns nullopt for a string
// that is not a value (the caller names the field in its error).
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_CORE_JOB_STATE_NAMES_H_
#define PEREGRINE_CONTROLLER_CORE_JOB_STATE_NAMES_H_

#include <optional>
#include <string_view>

#include "absl/strings/str_format.h"

namespace peregrine {

// Condition::status.
enum class ConditionStatus { kTrue, kFalse, kUnknown };  // "True", "False", "Unknown"
const char* ToString(ConditionStatus value);
std::optional<ConditionStatus> ParseConditionStatus(std::string_view name);

// DiagnosisStageRecord::stage and StopTimeDiagnosis::stage, the stages of a stop-time
// diagnosis (stop_time_diagnosis.h): "stop", "alignment", "eud", "all_to_all", "all_gather",
// "replay". The name is also the metric label and part of the stage's command ids; "%s" in
// absl::StrFormat prints it.
enum class StopTimeStage { kStop, kAlignment, kEud, kAllToAll, kAllGather, kReplay };
const char* ToString(StopTimeStage value);
std::optional<StopTimeStage> ParseStopTimeStage(std::string_view name);
absl::FormatConvertResult<absl::FormatConversionCharSet::kString> AbslFormatConvert(
    StopTimeStage value, const absl::FormatConversionSpec& spec, absl::FormatSink* sink);

// DiagnosisStageRecord::verdict.
enum class StageVerdict { kPending, kPassed, kFailed, kNoVerdict };  // "" while running, "passed", "failed", "no-verdict"
const char* ToString(StageVerdict value);
std::optional<StageVerdict> ParseStageVerdict(std::string_view name);

// VersionRecord::outcome.
enum class VersionOutcome { kRunning, kHealthy, kFailed, kRolledBack };  // "Running", "Healthy", ...
const char* ToString(VersionOutcome value);
std::optional<VersionOutcome> ParseVersionOutcome(std::string_view name);

// FailSlowValidation::state: "" (not started), "Pausing", "Gemm", "Links", "Resuming", "Done".
enum class ValidationState { kNotStarted, kPausing, kGemm, kLinks, kResuming, kDone };
const char* ToString(ValidationState value);
std::optional<ValidationState> ParseValidationState(std::string_view name);

// FailSlowValidation::verdict: "" (not judged), "confirmed", "not confirmed", "failed".
enum class ValidationVerdict { kNone, kConfirmed, kNotConfirmed, kFailed };
const char* ToString(ValidationVerdict value);
std::optional<ValidationVerdict> ParseValidationVerdict(std::string_view name);

// FailSlowFinding::state: "Profiling" (locating), "Localized", "Recovered".
enum class FailSlowState { kProfiling, kLocalized, kRecovered };
const char* ToString(FailSlowState value);
std::optional<FailSlowState> ParseFailSlowState(std::string_view name);

// FailSlowFinding::kind: "" (not localized), "compute", "communication",
// "compute+communication".
enum class FailSlowKind { kUnlocalized, kCompute, kCommunication, kComputeAndCommunication };
const char* ToString(FailSlowKind value);
std::optional<FailSlowKind> ParseFailSlowKind(std::string_view name);

// FailSlowFinding::tier (GUARD): "monitor", "mitigate", "replace".
enum class FailSlowTier { kMonitor, kMitigate, kReplace };
const char* ToString(FailSlowTier value);
std::optional<FailSlowTier> ParseFailSlowTier(std::string_view name);

// Incident::kind, the class of trouble: "MachineLost", "MachineFault", "NetworkAlarms",
// "ProcessCrash", "UserCodeError", "NaNLoss", "LossSpike", "SilentDataCorruption", "Hang",
// "MfuDrop", "FailSlow" (the mitigation ladder replaces a slow machine). The string is also
// the Warning event's reason and the Degraded condition's.
enum class IncidentKind {
  kMachineLost,
  kMachineFault,
  kNetworkAlarms,
  kProcessCrash,
  kUserCodeError,
  kNaNLoss,
  kLossSpike,
  kSilentDataCorruption,
  kHang,
  kMfuDrop,
  kFailSlow,
};
const char* ToString(IncidentKind value);
std::optional<IncidentKind> ParseIncidentKind(std::string_view name);

// FailSlowMitigationRecord::strategy, the rungs of the mitigation ladder
// (failslow_mitigation.h): "ignore" (S1), "redistribute" (S2, micro-batches), "remap"
// (S3, topology), "replace" (S4, evict the slow machine).
enum class MitigationStrategy { kIgnore, kRedistribute, kRemap, kReplace };
const char* ToString(MitigationStrategy value);
std::optional<MitigationStrategy> ParseMitigationStrategy(std::string_view name);

// DiagnosticRequest::kind, the diagnostics the controller asks an agent to run
// (agent/diagnostics/README.md): "eud", "all_to_all", "all_gather", "alignment", "replay",
// "gemm", "p2p_rounds".
enum class DiagnosticKind { kEud, kAllToAll, kAllGather, kAlignment, kReplay, kGemm, kP2pRounds };
const char* ToString(DiagnosticKind value);
std::optional<DiagnosticKind> ParseDiagnosticKind(std::string_view name);

// StackInvestigation::kind: "Hang", "MfuDrop".
enum class InvestigationKind { kHang, kMfuDrop };
const char* ToString(InvestigationKind value);
std::optional<InvestigationKind> ParseInvestigationKind(std::string_view name);

// StackInvestigation::state: "Capturing", "Waiting" (between MFU rounds), "Decided",
// "Evicted", "Reattempted", "Resolved" (progress resumed / MFU recovered), "Abandoned"
// (another failure).
enum class InvestigationState { kCapturing, kWaiting, kDecided, kEvicted, kReattempted, kResolved, kAbandoned };
const char* ToString(InvestigationState value);
std::optional<InvestigationState> ParseInvestigationState(std::string_view name);

// InspectionObservation::status, as on the wire: "OK", "NOT_PRESENT", "WARNING", "FAULT",
// "ERROR", "CANNOT_SEE" (the inspection cannot see from where it runs: neither a pass nor
// a fault); "UNKNOWN" for a status this controller does not know.
enum class InspectionStatus { kUnknown, kOk, kNotPresent, kWarning, kFault, kError, kCannotSee };
const char* ToString(InspectionStatus value);
std::optional<InspectionStatus> ParseInspectionStatus(std::string_view name);

// JobEvent::type (Kubernetes event types): "Normal", "Warning".
enum class JobEventType { kNormal, kWarning };
const char* ToString(JobEventType value);
std::optional<JobEventType> ParseJobEventType(std::string_view name);

// CheckpointEventObservation::kind (peregrine.v1.CheckpointEvent.Kind): "Skipped",
// "MemoryShort", "CorruptShard", "RestoreFailed", "Restored", "BackupFailed", "PersistFailed" (the job
// event's reason is "Checkpoint" + the name).
enum class CheckpointEventKind { kSkipped, kMemoryShort, kCorruptShard, kRestoreFailed, kRestored, kBackupFailed, kPersistFailed };
const char* ToString(CheckpointEventKind value);
std::optional<CheckpointEventKind> ParseCheckpointEventKind(std::string_view name);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_JOB_STATE_NAMES_H_
