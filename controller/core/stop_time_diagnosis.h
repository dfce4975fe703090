// Stop-time diagnosis (a crash with no culprit, NaN loss, loss or grad-norm jump -> pause
// and diagnose): an explicit, persisted state machine that the decision engine advances
// once per round.
//
// BeginStopTimeDiagnosis creates the state; AdvanceStopTimeDiagnosis runs the stages
// (stop, alignment for numeric faults, eud, all_to_all, all_gather, and replay after
// StartReplayStage) as RunDiagnostic commands with deterministic ids (DiagnosisCommandId:
// "<prefix>/<stage>[-r<round>]/<pod>"; a restarted controller re-sends the same ids and
// agents answer from stored results, so no stage runs twice). The first stage with failing
// machines finishes the diagnosis with them as failed_slots; when every stage passes it
// finishes with none and the engine decides what comes next. SlowBandwidthOutliers judges
// bandwidth against peers. The stages and judging rules are described in
// stop_time_diagnosis.cc.
//
// Pure: no clocks or I/O (now is passed in). Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_STOP_TIME_DIAGNOSIS_H_
#define PEREGRINE_CONTROLLER_CORE_STOP_TIME_DIAGNOSIS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

inline constexpr int64_t kAnswerMarginNs = 30'000'000'000;

// A machine's fastest bus bandwidth below this fraction of its round's faster half fails the
// stage (with the typical-run condition below). The stand-in cluster on a shared 2-core CPU
// shows a starved healthy machine's fastest run down to 0.2x its peers' fastest but never
// below about 0.9x their median typical run (measured, see the unit test); real degradations
// worth evicting for (NVLink falling back to PCIe, a NIC at a quarter of its rate or worse)
// are far below 0.25x in every run.
inline constexpr double kSlowBandwidthFraction = 0.25;

// One machine's bandwidth figures in a stage round.
struct BandwidthSample {
  int key = 0;                // e.g. task or slot index, returned as given
  double peak_gbps = 0;       // the fastest repetition (busbw when only one figure is known)
  double typical_gbps = 0;    // the median repetition
};

// The keys whose peak is below `fraction` x the median of the faster half of all peaks and
// also below `fraction` x the median of the faster half of all typical figures (the faster
// half: sorted positions n/2 .. n-1; a median of an even count is the mean of the two middle
// values), in input order. The faster half is the healthy level while fewer than half of
// the samples are slow, as when one bad NIC slows both members of its all-gather pairs.
// Fewer than two samples, or a median of all peaks <= 0, give none. Pure.
std::vector<int> SlowBandwidthOutliers(const std::vector<BandwidthSample>& samples,
                                       double fraction = kSlowBandwidthFraction);

// One slot of the job as the diagnosis sees it.
struct DiagnosisMachine {
  int slot = 0;
  std::string pod;
  std::string machine_id;
  std::string address;  // rendezvous host of this pod (127.0.0.1 in local mode)
  const AgentObservation* agent = nullptr;  // null when no agent ever registered
};

struct DiagnosisContext {
  std::string id_prefix;  // "<namespace>/<job>/incident-<id>"
  std::vector<DiagnosisMachine> machines;  // by slot
  int gpus_per_machine = 1;
  ParallelismSpec parallelism;
  int stop_grace_ms = 10000;
  // heartbeatTimeoutSeconds: an agent silent this long has lost its link, and its missing
  // answer is no verdict on its machine.
  int64_t heartbeat_timeout_ns = 30'000'000'000;
  int64_t now = 0;
};

struct DiagnosisAdvance {
  std::vector<CommandToSend> commands;  // to send now (none already pending or answered)
  bool finished = false;                // the diagnosis has a verdict (the state is done)
  std::vector<int> failed_slots;        // when finished: the machines to evict (empty: all passed)
  int64_t requeue_after_ns = 0;         // look again by then (the current deadline)
};

// A new diagnosis state (stage "stop", round 0).
StopTimeDiagnosis BeginStopTimeDiagnosis(uint64_t incident_id, bool numeric, uint32_t port_base, int64_t now);

// Switches a diagnosis whose stages all passed to the dual-phase replay stage.
void StartReplayStage(StopTimeDiagnosis* state, int64_t now);

// Advances the diagnosis as far as the observations allow, appending or updating the stage
// records in `records` (the incident's). When `finished`, `state` must be cleared by the
// caller (after it decided what to do with failed_slots).
DiagnosisAdvance AdvanceStopTimeDiagnosis(const DiagnosisContext& context, StopTimeDiagnosis* state,
                                          std::vector<DiagnosisStageRecord>* records);

// The command id of `pod`'s command in a stage round.
std::string DiagnosisCommandId(const std::string& prefix, StopTimeStage stage, int round, const std::string& pod);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_STOP_TIME_DIAGNOSIS_H_
