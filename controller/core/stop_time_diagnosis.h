// Stop-time diagnosis ("crash with no culprit, NaN loss, loss or grad-norm jump ->
// pause; stop-time diagnosis"): an explicit, persisted state machine that the decision
// engine advances once per round. Training is stopped on every slot, then the stages run
// one after the other, each as RunDiagnostic commands with deterministic ids
// "<prefix>/<stage>[-r<round>]/<pod>" (a restarted controller re-sends the same ids and the
// agents answer with their stored results, so no stage runs twice):
//   stop        kStop on every connected agent; done when each answered or after the
//               restart grace + margin;
//   alignment   (NaN / spike only, first) every machine runs the same reference step; the
//               digest held by a strict majority of machines is healthy, the others (and a
//               machine whose run produced NaN) fail; no majority -> no verdict;
//   eud         every machine: GPU self-test (dcgmi diag or the stand-in);
//   all_to_all  every machine: intra-machine all-to-all, contents and bandwidth;
//   all_gather  neighbour pairs (neighbour_pairs.h), 2 or 3 rounds; a machine whose every
//               pair failed is the culprit;
//   replay      (only when the engine asks for it, see StartReplayStage) dual-phase replay
//               (diagnosis/dual_phase_replay.h): round 0 the horizontal groups, round 1 the
//               vertical ones; every group is one replay job (rendezvous at its first
//               machine); the digest shared by the most groups of the same shape (at least
//               two, strictly more than any other digest) is healthy, the others fail; the
//               failing horizontal and vertical groups intersect in the faulty machine.
// Bandwidth (all_to_all, all_gather): a machine whose answer passed on contents fails too
// when even its fastest repetition (peak_busbw_gbps) is below kSlowBandwidthFraction x the
// median of the round's fastest repetitions AND below kSlowBandwidthFraction x the median of
// the round's typical (median-repetition, busbw_gbps) figures (SlowBandwidthOutliers): a
// degraded NVLink or NIC is slow in every repetition, while a machine starved of CPU on a
// shared host stays near its peers' typical run. Peers, not a fixed GB/s figure, set the bar.
// Judging a machine's answer: not_present -> passed (recorded); a command error (e.g. an
// agent without that diagnostic: UNIMPLEMENTED) -> no evidence, passed (recorded as
// unavailable); no answer by the stage deadline (the kind's timeout + kAnswerMarginNs) ->
// failed if its agent is connected (a live agent whose diagnostic cannot finish points at
// the machine itself; the agent kills diagnostics at their timeout and answers), no
// verdict for it if the agent is disconnected (the lost-pod path decides about that
// machine). A stage in which more than half of at least two machines fail gives no
// verdict (a job-wide cause such as a bad build or a diagnosis bug is not a machine fault).
// The first stage with failing machines ends the diagnosis with them as the verdict; when
// every stage passes the engine decides what comes next (reattempt, rollback or replay).
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

// A machine's fastest bus bandwidth below this fraction of its round's median fails the
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

// The keys whose peak is below `fraction` x the median of all peaks and also below
// `fraction` x the median of all typical figures (medians: the mean of the two middle values
// for an even count), in input order. Fewer than two samples, or a median peak <= 0, give none. Pure.
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
std::string DiagnosisCommandId(const std::string& prefix, const std::string& stage, int round, const std::string& pod);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_STOP_TIME_DIAGNOSIS_H_
