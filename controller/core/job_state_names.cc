#include "controller/core/job_state_names.h"

#include "controller/core/job_spec.h"

#include <cstddef>
#include <utility>

namespace peregrine {
namespace {

// One table per enum listing every value with its string; ToString and Parse search it.
template <typename E>
using Names = std::pair<E, const char*>;

template <typename E, std::size_t N>
const char* NameIn(const Names<E> (&table)[N], E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "";  // unreachable: every table lists every value
}

template <typename E, std::size_t N>
std::optional<E> ValueIn(const Names<E> (&table)[N], std::string_view name) {
  for (const auto& [v, n] : table) {
    if (name == n) return v;
  }
  return std::nullopt;
}

constexpr Names<ConditionStatus> kConditionStatus[] = {
    {ConditionStatus::kTrue, "True"}, {ConditionStatus::kFalse, "False"}, {ConditionStatus::kUnknown, "Unknown"}};
constexpr Names<StopTimeStage> kStopTimeStage[] = {
    {StopTimeStage::kStop, "stop"},           {StopTimeStage::kAlignment, "alignment"},
    {StopTimeStage::kEud, "eud"},             {StopTimeStage::kAllToAll, "all_to_all"},
    {StopTimeStage::kAllGather, "all_gather"}, {StopTimeStage::kReplay, "replay"}};
constexpr Names<StageVerdict> kStageVerdict[] = {{StageVerdict::kPending, ""},
                                                 {StageVerdict::kPassed, "passed"},
                                                 {StageVerdict::kFailed, "failed"},
                                                 {StageVerdict::kNoVerdict, "no-verdict"}};
constexpr Names<VersionOutcome> kVersionOutcome[] = {{VersionOutcome::kRunning, "Running"},
                                                     {VersionOutcome::kHealthy, "Healthy"},
                                                     {VersionOutcome::kFailed, "Failed"},
                                                     {VersionOutcome::kRolledBack, "RolledBack"}};
constexpr Names<ValidationState> kValidationState[] = {
    {ValidationState::kNotStarted, ""}, {ValidationState::kPausing, "Pausing"},   {ValidationState::kGemm, "Gemm"},
    {ValidationState::kLinks, "Links"}, {ValidationState::kResuming, "Resuming"}, {ValidationState::kDone, "Done"}};
constexpr Names<ValidationVerdict> kValidationVerdict[] = {{ValidationVerdict::kNone, ""},
                                                           {ValidationVerdict::kConfirmed, "confirmed"},
                                                           {ValidationVerdict::kNotConfirmed, "not confirmed"},
                                                           {ValidationVerdict::kFailed, "failed"}};
constexpr Names<FailSlowState> kFailSlowState[] = {{FailSlowState::kProfiling, "Profiling"},
                                                   {FailSlowState::kLocalized, "Localized"},
                                                   {FailSlowState::kRecovered, "Recovered"}};
constexpr Names<FailSlowKind> kFailSlowKind[] = {{FailSlowKind::kUnlocalized, ""},
                                                 {FailSlowKind::kCompute, "compute"},
                                                 {FailSlowKind::kCommunication, "communication"},
                                                 {FailSlowKind::kComputeAndCommunication, "compute+communication"}};
constexpr Names<FailSlowTier> kFailSlowTier[] = {
    {FailSlowTier::kMonitor, "monitor"}, {FailSlowTier::kMitigate, "mitigate"}, {FailSlowTier::kReplace, "replace"}};
constexpr Names<IncidentKind> kIncidentKind[] = {
    {IncidentKind::kMachineLost, "MachineLost"},     {IncidentKind::kMachineFault, "MachineFault"},
    {IncidentKind::kNetworkAlarms, "NetworkAlarms"}, {IncidentKind::kProcessCrash, "ProcessCrash"},
    {IncidentKind::kUserCodeError, "UserCodeError"}, {IncidentKind::kNaNLoss, "NaNLoss"},
    {IncidentKind::kLossSpike, "LossSpike"},         {IncidentKind::kSilentDataCorruption, "SilentDataCorruption"},
    {IncidentKind::kHang, "Hang"},                   {IncidentKind::kMfuDrop, "MfuDrop"},
    {IncidentKind::kFailSlow, "FailSlow"}};
constexpr Names<MitigationStrategy> kMitigationStrategy[] = {
    {MitigationStrategy::kIgnore, "ignore"},
    {MitigationStrategy::kRedistribute, "redistribute"},
    {MitigationStrategy::kRemap, "remap"},
    {MitigationStrategy::kReplace, "replace"}};
constexpr Names<DiagnosticKind> kDiagnosticKind[] = {
    {DiagnosticKind::kEud, "eud"},         {DiagnosticKind::kAllToAll, "all_to_all"},
    {DiagnosticKind::kAllGather, "all_gather"}, {DiagnosticKind::kAlignment, "alignment"},
    {DiagnosticKind::kReplay, "replay"},   {DiagnosticKind::kGemm, "gemm"},
    {DiagnosticKind::kP2pRounds, "p2p_rounds"}};
constexpr Names<InvestigationKind> kInvestigationKind[] = {{InvestigationKind::kHang, "Hang"},
                                                           {InvestigationKind::kMfuDrop, "MfuDrop"}};
constexpr Names<InvestigationState> kInvestigationState[] = {
    {InvestigationState::kCapturing, "Capturing"}, {InvestigationState::kWaiting, "Waiting"},
    {InvestigationState::kDecided, "Decided"},     {InvestigationState::kEvicted, "Evicted"},
    {InvestigationState::kReattempted, "Reattempted"}, {InvestigationState::kResolved, "Resolved"},
    {InvestigationState::kAbandoned, "Abandoned"}};
constexpr Names<InspectionStatus> kInspectionStatus[] = {
    {InspectionStatus::kUnknown, "UNKNOWN"}, {InspectionStatus::kOk, "OK"},       {InspectionStatus::kNotPresent, "NOT_PRESENT"},
    {InspectionStatus::kWarning, "WARNING"}, {InspectionStatus::kFault, "FAULT"},
    {InspectionStatus::kError, "ERROR"},     {InspectionStatus::kCannotSee, "CANNOT_SEE"}};
constexpr Names<JobEventType> kJobEventType[] = {{JobEventType::kNormal, "Normal"}, {JobEventType::kWarning, "Warning"}};
constexpr Names<CheckpointEventKind> kCheckpointEventKind[] = {
    {CheckpointEventKind::kSkipped, "Skipped"},           {CheckpointEventKind::kMemoryShort, "MemoryShort"},
    {CheckpointEventKind::kCorruptShard, "CorruptShard"}, {CheckpointEventKind::kRestoreFailed, "RestoreFailed"},
    {CheckpointEventKind::kRestored, "Restored"},         {CheckpointEventKind::kBackupFailed, "BackupFailed"},
    {CheckpointEventKind::kPersistFailed, "PersistFailed"}};

}  // namespace

#define PEREGRINE_NAMES(Type, table)                                                  \
  const char* ToString(Type value) { return NameIn(table, value); }                  \
  std::optional<Type> Parse##Type(std::string_view name) { return ValueIn(table, name); }

PEREGRINE_NAMES(ConditionStatus, kConditionStatus)
PEREGRINE_NAMES(StopTimeStage, kStopTimeStage)
PEREGRINE_NAMES(StageVerdict, kStageVerdict)
PEREGRINE_NAMES(VersionOutcome, kVersionOutcome)
PEREGRINE_NAMES(ValidationState, kValidationState)
PEREGRINE_NAMES(ValidationVerdict, kValidationVerdict)
PEREGRINE_NAMES(FailSlowState, kFailSlowState)
PEREGRINE_NAMES(FailSlowKind, kFailSlowKind)
PEREGRINE_NAMES(FailSlowTier, kFailSlowTier)
PEREGRINE_NAMES(IncidentKind, kIncidentKind)
PEREGRINE_NAMES(MitigationStrategy, kMitigationStrategy)
PEREGRINE_NAMES(DiagnosticKind, kDiagnosticKind)
PEREGRINE_NAMES(InvestigationKind, kInvestigationKind)
PEREGRINE_NAMES(InvestigationState, kInvestigationState)
PEREGRINE_NAMES(InspectionStatus, kInspectionStatus)
PEREGRINE_NAMES(JobEventType, kJobEventType)
PEREGRINE_NAMES(CheckpointEventKind, kCheckpointEventKind)

#undef PEREGRINE_NAMES

absl::FormatConvertResult<absl::FormatConversionCharSet::kString> AbslFormatConvert(
    StopTimeStage value, const absl::FormatConversionSpec& spec, absl::FormatSink* sink) {
  (void)spec;
  sink->Append(ToString(value));
  return {true};
}

// Declared in job_spec.h (the spec's enums); defined here so that the decision core, which
// names them in events, does not depend on the parser.
const char* LaunchModeName(LaunchMode /*mode*/) { return "PerGPU"; }
const char* FailSlowMitigationName(FailSlowMitigation m) {
  return m == FailSlowMitigation::kAuto ? "Auto" : "MonitorOnly";
}

}  // namespace peregrine
