#include "controller/status_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "controller/status_compact.h"

namespace peregrine {
namespace {

using nlohmann::json;

std::string Time(int64_t nanos) { return nanos == 0 ? "" : FormatRfc3339(nanos); }

// A cordon's reason is the eviction's (an incident signal): its first 1024 bytes, as the
// node's quarantine-reason annotation keeps.
std::string CordonReason(const std::string& reason) {
  if (reason.size() <= 1024) return reason;
  size_t cut = 1024;
  while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xC0) == 0x80) --cut;
  return reason.substr(0, cut);
}

// Free text in the status (signals, decisions, messages, reasons) is cut to
// kMaxStatusTextBytes and a list of text lines (one per machine or rank) to
// kMaxStatusListEntries, so no single finding can make the TrainingJob status too large
// to store. The decision core already summarises its lists (list_summary.h); this is the
// backstop for text that arrives from elsewhere (agents' messages, older states).
constexpr size_t kMaxStatusTextBytes = 4096;
constexpr size_t kMaxStatusListEntries = 64;

std::string Bounded(const std::string& text) {
  if (text.size() <= kMaxStatusTextBytes) return text;
  size_t cut = kMaxStatusTextBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return absl::StrCat(text.substr(0, cut), "... truncated ", text.size() - cut, " bytes");
}

json BoundedLines(const std::vector<std::string>& lines) {
  json out = json::array();
  const size_t named = lines.size() <= kMaxStatusListEntries ? lines.size() : kMaxStatusListEntries - 1;
  for (size_t i = 0; i < named; ++i) out.push_back(Bounded(lines[i]));
  if (named < lines.size()) out.push_back(absl::StrCat("and ", lines.size() - named, " more (", lines.size(), " in all)"));
  return out;
}

// Integers read from the JSON. A number that is not whole or does not fit T (or a
// non-number) throws std::invalid_argument naming `key`, which JobStatusFromJson turns
// into an error: nlohmann's own conversion would cast such a double to T, which is
// undefined behaviour.
template <typename T>
T CheckedInt(const json& v, const char* key) {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(kMax)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0 ? static_cast<uint64_t>(i) <= static_cast<uint64_t>(kMax)
               : std::is_signed_v<T> && i >= static_cast<int64_t>(kMin)) {
      return static_cast<T>(i);
    }
  } else if (v.is_number_float()) {
    // Whole doubles in [kMin, kMax + 1) convert; both bounds are exact in a double.
    const double d = v.get<double>();
    if (std::trunc(d) == d && d >= static_cast<double>(kMin) && d < static_cast<double>(kMax) + 1.0) {
      return static_cast<T>(d);
    }
  }
  throw std::invalid_argument(absl::StrCat(key, ": expected an integer in [", kMin, ", ", kMax, "], got ", v.dump()));
}

template <typename T>
T IntValue(const json& j, const char* key, T fallback) {
  return j.contains(key) ? CheckedInt<T>(j[key], key) : fallback;
}

template <typename T>
std::vector<T> IntVector(const json& j, const char* key) {
  std::vector<T> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) throw std::invalid_argument(absl::StrCat(key, ": expected an array of integers"));
  for (const json& v : j[key]) out.push_back(CheckedInt<T>(v, key));
  return out;
}

int64_t ParseTime(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) return 0;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, j[key].get<std::string>(), &t, &err)) {
    throw std::invalid_argument(absl::StrCat(key, ": not an RFC 3339 time: ", err));
  }
  return absl::ToUnixNanos(t);
}

json CodeToJson(const CodeVersionSpec& c) {
  json j = {{"image", c.image}, {"command", c.command}, {"revision", c.revision}};
  if (!c.env.empty()) j["env"] = c.env;
  return j;
}

CodeVersionSpec CodeFromJson(const json& j) {
  CodeVersionSpec c;
  c.image = j.value("image", "");
  c.command = j.value("command", std::vector<std::string>{});
  c.revision = j.value("revision", "");
  c.env = j.value("env", std::map<std::string, std::string>{});
  return c;
}

// Reads the enum value named by j[key] into *out, leaving it as is when the key is absent;
// a name that is not a value is an error naming `field`.
template <typename E>
void ReadEnum(const json& j, const char* key, std::optional<E> (*parse)(std::string_view), const char* field, E* out) {
  if (!j.contains(key)) return;
  const std::string name = j.at(key).get<std::string>();
  std::optional<E> value = parse(name);
  if (!value) throw std::invalid_argument(absl::StrCat(field, ": unknown value '", name, "'"));
  *out = *value;
}

// ReadEnum for a key that must be present (a missing one throws as json::at does).
template <typename E>
void ReadRequiredEnum(const json& j, const char* key, std::optional<E> (*parse)(std::string_view), const char* field,
                      E* out) {
  (void)j.at(key);
  ReadEnum(j, key, parse, field, out);
}

json CheckpointToJson(const CheckpointStatus& c, const std::vector<SlotStatus>& slots) {
  json events = json::array();
  for (const CheckpointEventRecord& e : c.events) {
    events.push_back({{"at", Time(e.at)}, {"pod", e.pod}, {"kind", ToString(e.kind)}, {"step", e.step},
                      {"globalRank", e.global_rank}, {"detail", e.detail}});
  }
  json out = {{"lastCompleteStep", c.last_complete_step}, {"lastPersistedStep", c.last_persisted_step},
              {"placementRuns", PlacementRunsToJson(c.placement)}, {"degradedReason", c.degraded_reason},
              {"failedSteps", c.failed_steps}, {"events", events}};
  EventsSeenToJson(c.events_seen, slots, &out);
  return out;
}

// Older statuses list the placement slot by slot ("placement"); newer ones in runs.
CheckpointStatus CheckpointFromJson(const json& j, const std::vector<SlotStatus>& slots) {
  CheckpointStatus c;
  c.last_complete_step = IntValue<uint64_t>(j, "lastCompleteStep", 0);
  c.last_persisted_step = IntValue<uint64_t>(j, "lastPersistedStep", 0);
  if (j.contains("placementRuns")) c.placement = PlacementRunsFromJson(j["placementRuns"], std::max(slots.size(), kMaxPlacementSlots));
  for (const json& p : j.value("placement", json::array())) {
    c.placement.push_back(CheckpointSlotPlacement{CheckedInt<int>(p.at("slot"), "slot"), IntVector<int>(p, "holders")});
  }
  c.degraded_reason = j.value("degradedReason", "");
  c.failed_steps = IntVector<uint64_t>(j, "failedSteps");
  for (const json& e : j.value("events", json::array())) {
    CheckpointEventRecord r;
    r.at = ParseTime(e, "at");
    r.pod = e.value("pod", "");
    ReadEnum(e, "kind", ParseCheckpointEventKind, "checkpoint.events[].kind", &r.kind);
    r.step = IntValue<uint64_t>(e, "step", 0);
    r.global_rank = IntValue<int>(e, "globalRank", -1);
    r.detail = e.value("detail", "");
    c.events.push_back(std::move(r));
  }
  c.events_seen = EventsSeenFromJson(j, slots);
  return c;
}

JobPhase PhaseFromName(const std::string& s) {
  for (JobPhase p : {JobPhase::kPending, JobPhase::kRunning, JobPhase::kRecovering, JobPhase::kSucceeded,
                     JobPhase::kFailed, JobPhase::kSuspended}) {
    if (s == JobPhaseName(p)) return p;
  }
  throw std::invalid_argument(absl::StrCat("phase: unknown value '", s, "'"));
}

json StagesToJson(const std::vector<DiagnosisStageRecord>& stages) {
  json out = json::array();
  for (const DiagnosisStageRecord& r : stages) {
    out.push_back({{"stage", ToString(r.stage)}, {"startedAt", Time(r.started_at)}, {"finishedAt", Time(r.finished_at)},
                   {"verdict", ToString(r.verdict)}, {"failedMachines", r.failed_machines}, {"results", BoundedLines(r.results)},
                   {"note", Bounded(r.note)}});
  }
  return out;
}

std::vector<DiagnosisStageRecord> StagesFromJson(const json& j) {
  std::vector<DiagnosisStageRecord> out;
  for (const json& r : j) {
    DiagnosisStageRecord x;
    ReadRequiredEnum(r, "stage", ParseStopTimeStage, "incidents[].diagnosis[].stage", &x.stage);
    x.started_at = ParseTime(r, "startedAt");
    x.finished_at = ParseTime(r, "finishedAt");
    ReadEnum(r, "verdict", ParseStageVerdict, "incidents[].diagnosis[].verdict", &x.verdict);
    x.failed_machines = r.value("failedMachines", std::vector<std::string>{});
    x.results = r.value("results", std::vector<std::string>{});
    x.note = r.value("note", "");
    out.push_back(std::move(x));
  }
  return out;
}

// Stack diagnosis (hang / MFU-drop investigations, controller/hang_policy.h).
json StackDiagnosisToJson(const StackDiagnosisStatus& d) {
  json investigations = json::array();
  for (const StackInvestigation& inv : d.investigations) {
    json rounds = json::array();
    for (const StackRound& r : inv.rounds) {
      rounds.push_back({{"startedAt", Time(r.started_at)}, {"finishedAt", Time(r.finished_at)}, {"groups", BoundedLines(r.groups)},
                        {"suspectRanks", r.suspect_ranks}, {"unansweredSlots", r.unanswered_slots},
                        {"flaggedKind", r.flagged_kind}, {"flaggedIndex", r.flagged_index},
                        {"explanation", r.explanation}});
    }
    investigations.push_back({{"id", inv.id}, {"kind", ToString(inv.kind)}, {"state", ToString(inv.state)}, {"attempt", inv.attempt},
                              {"incidentId", inv.incident_id}, {"signal", Bounded(inv.signal)},
                              {"startedAt", Time(inv.started_at)}, {"endedAt", Time(inv.ended_at)},
                              {"roundsPlanned", inv.rounds_planned}, {"nextRoundAt", Time(inv.next_round_at)},
                              {"rounds", rounds}, {"chosenGroup", inv.chosen_group}, {"slots", inv.slots},
                              {"machines", inv.machines}, {"explanation", inv.explanation}});
  }
  return {{"progressAttempt", d.progress_attempt}, {"progressStep", d.progress_step},
          {"progressAt", Time(d.progress_at)}, {"healthyIterationSeconds", d.healthy_iteration_seconds},
          {"degradedSince", Time(d.degraded_since)}, {"nextId", d.next_id}, {"investigations", investigations}};
}

StackDiagnosisStatus StackDiagnosisFromJson(const json& j) {
  StackDiagnosisStatus d;
  d.progress_attempt = IntValue<uint64_t>(j, "progressAttempt", 0);
  d.progress_step = IntValue<uint64_t>(j, "progressStep", 0);
  d.progress_at = ParseTime(j, "progressAt");
  d.healthy_iteration_seconds = j.value("healthyIterationSeconds", 0.0);
  d.degraded_since = ParseTime(j, "degradedSince");
  d.next_id = IntValue<uint64_t>(j, "nextId", 1);
  for (const json& i : j.value("investigations", json::array())) {
    StackInvestigation inv;
    inv.id = CheckedInt<decltype(inv.id)>(i.at("id"), "id");
    ReadEnum(i, "kind", ParseInvestigationKind, "stackDiagnosis.investigations[].kind", &inv.kind);
    ReadEnum(i, "state", ParseInvestigationState, "stackDiagnosis.investigations[].state", &inv.state);
    inv.attempt = IntValue<uint64_t>(i, "attempt", 0);
    inv.incident_id = IntValue<uint64_t>(i, "incidentId", 0);
    inv.signal = i.value("signal", "");
    inv.started_at = ParseTime(i, "startedAt");
    inv.ended_at = ParseTime(i, "endedAt");
    inv.rounds_planned = IntValue<int>(i, "roundsPlanned", 1);
    inv.next_round_at = ParseTime(i, "nextRoundAt");
    for (const json& r : i.value("rounds", json::array())) {
      StackRound round;
      round.started_at = ParseTime(r, "startedAt");
      round.finished_at = ParseTime(r, "finishedAt");
      round.groups = r.value("groups", std::vector<std::string>{});
      round.suspect_ranks = IntVector<int>(r, "suspectRanks");
      round.unanswered_slots = IntVector<int>(r, "unansweredSlots");
      round.flagged_kind = r.value("flaggedKind", "");
      round.flagged_index = IntValue<int>(r, "flaggedIndex", -1);
      round.explanation = r.value("explanation", "");
      inv.rounds.push_back(std::move(round));
    }
    inv.chosen_group = i.value("chosenGroup", "");
    inv.slots = IntVector<int>(i, "slots");
    inv.machines = i.value("machines", std::vector<std::string>{});
    inv.explanation = i.value("explanation", "");
    d.investigations.push_back(std::move(inv));
  }
  return d;
}

}  // namespace

std::string FormatRfc3339(int64_t unix_nanos) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixNanos(unix_nanos), absl::UTCTimeZone());
}

std::string JobStatusToJson(const JobStatus& s, int indent, StatusForm form) {
  const bool full = form == StatusForm::kFull;
  json j;
  j["phase"] = JobPhaseName(s.phase);
  j["observedGeneration"] = s.observed_generation;
  json conds = json::array();
  for (const Condition& c : s.conditions) {
    conds.push_back({{"type", c.type}, {"status", ToString(c.status)}, {"reason", c.reason}, {"message", Bounded(c.message)},
                     {"observedGeneration", c.observed_generation}, {"lastTransitionTime", Time(c.last_transition_time)}});
  }
  j["conditions"] = conds;
  j["attempt"] = s.attempt;
  j["resumeStep"] = s.resume_step;
  j["attemptStartedAt"] = Time(s.attempt_started_at);
  j["firstStepSeconds"] = s.first_step_seconds;
  j["masterAddr"] = s.master_addr;
  j["masterPort"] = s.master_port;
  j["codeVersion"] = CodeToJson(s.code);
  json versions = json::array();
  for (const VersionRecord& v : s.version_history) {
    versions.push_back({{"codeVersion", CodeToJson(v.code)}, {"appliedAt", Time(v.applied_at)}, {"reason", v.reason},
                        {"outcome", ToString(v.outcome)}, {"appliedAtStep", v.applied_at_step}});
  }
  j["versionHistory"] = versions;
  if (s.pending_code) {
    j["pendingCode"] = CodeToJson(*s.pending_code);
    j["pendingCodeSince"] = Time(s.pending_code_since);
  }
  json alarms = json::array();
  for (const NetworkAlarmRecord& a : s.network_alarms) {
    alarms.push_back({{"machineId", a.machine_id}, {"at", Time(a.at)}, {"summary", a.summary}});
  }
  j["networkAlarms"] = alarms;
  // Up to kMaxListedMachines slots (and always in the full form) one object each; a
  // larger job's as the compact machineTable (status_compact.h).
  if (full || s.slots.size() <= kMaxListedMachines || !MachineTableFits(s.slots)) {
    json machines = json::array();
    for (const SlotStatus& m : s.slots) {
      machines.push_back({{"index", m.index}, {"pod", m.pod}, {"machineId", m.machine_id}, {"observed", m.observed}});
      if (m.node_unready_since != 0) {
        machines.back()["nodeUnreadySince"] = Time(m.node_unready_since);
        machines.back()["nodeUnreadyStep"] = m.node_unready_step;
        machines.back()["nodeUnreadyProgressAt"] = Time(m.node_unready_progress_at);
      }
    }
    j["machines"] = machines;
  } else {
    j["machineTable"] = MachineTableToJson(s.slots);
  }
  j["machineSummary"] = MachineSummaryToJson(s.slots);
  json standbys = json::array();
  for (const StandbyStatus& m : s.standbys) {
    standbys.push_back({{"pod", m.pod}, {"machineId", m.machine_id}, {"observed", m.observed}});
    if (m.node_unready_since != 0) standbys.back()["nodeUnreadySince"] = Time(m.node_unready_since);
  }
  j["standby"] = {{"desired", s.standby_desired}, {"ready", s.standby_ready}, {"pods", standbys}};
  j["lastCompletedStep"] = s.last_completed_step;
  j["maxCompletedStep"] = s.max_completed_step;
  j["meanIterationSeconds"] = s.mean_iteration_seconds;
  j["startedAt"] = Time(s.started_at);
  j["finishedAt"] = Time(s.finished_at);
  j["trainingTimeLostSeconds"] = s.training_time_lost_seconds;
  j["ettr"] = s.ettr;
  json incidents = json::array();
  std::map<uint64_t, std::string> signals;  // the stored signal of each incident listed
  for (const Incident& i : s.incidents) {
    const bool cut = !full && i.machines.size() > kMaxStoredIncidentMachines;
    const std::vector<std::string> named =
        cut ? std::vector<std::string>(i.machines.begin(), i.machines.begin() + kMaxStoredIncidentMachines) : i.machines;
    const std::string signal = Bounded(i.signal);
    signals.emplace(i.id, signal);  // the first incident of an id, as the reader finds it
    incidents.push_back({{"id", i.id}, {"kind", ToString(i.kind)}, {"signal", signal}, {"detectedAt", Time(i.detected_at)},
                         {"decidedAt", Time(i.decided_at)}, {"resumedAt", Time(i.resumed_at)},
                         {"machines", named}, {"decision", Bounded(i.decision)}, {"actions", BoundedLines(i.actions)},
                         {"stepAtFailure", i.step_at_failure}, {"resumeStep", i.resume_step},
                         {"stepsRedone", i.steps_redone},
                         {"trainingTimeLostSeconds", i.training_time_lost_seconds},
                         {"diagnosis", StagesToJson(i.diagnosis)}});
    if (cut || i.machines_not_named != 0) incidents.back()["machinesCount"] = i.machines.size() + i.machines_not_named;
  }
  j["incidents"] = incidents;
  json evicted = json::array();
  for (const Eviction& e : s.evicted) {
    evicted.push_back({{"machineId", e.machine_id}, {"pod", e.pod}, {"at", Time(e.at)},
                       {"quarantined", e.quarantined}, {"machineFault", e.machine_fault},
                       {"incidentId", e.incident_id}});
    // A burst's evictions share their incident's signal as the reason: stored once.
    const std::string reason = Bounded(e.reason);
    auto signal = signals.find(e.incident_id);
    if (!full && e.incident_id != 0 && signal != signals.end() && signal->second == reason) {
      evicted.back()["reasonIsIncidentSignal"] = true;
    } else {
      evicted.back()["reason"] = reason;
    }
  }
  j["evictedMachines"] = evicted;
  json cordons = json::array();
  for (const CordonRecord& c : s.cordons) {
    cordons.push_back({{"node", c.node}, {"reason", CordonReason(c.reason)}, {"at", Time(c.at)},
                       {"incidentId", c.incident_id}, {"byPeregrine", c.by_peregrine}});
  }
  j["cordons"] = cordons;
  j["cordonsDropped"] = s.cordons_dropped;
  if (s.suspension) {
    const SuspensionStatus& u = *s.suspension;
    j["suspension"] = {{"reason", u.reason}, {"message", Bounded(u.message)}, {"requestedAt", Time(u.requested_at)},
                       {"persistedBefore", u.persisted_before}, {"suspendedAt", Time(u.suspended_at)}};
  }
  j["nextIncidentId"] = s.next_incident_id;
  j["nextPodSerial"] = s.next_pod_serial;
  j["recoveries"] = s.recoveries;
  j["reattempts"] = s.reattempts;
  j["triageDeadline"] = Time(s.triage_deadline);
  j["rollbacks"] = s.rollbacks;
  j["lossReference"] = {{"losses", s.loss_reference.losses},
                        {"gradNorms", s.loss_reference.grad_norms},
                        {"step", s.loss_reference.step}};
  if (s.diagnosis) {
    const StopTimeDiagnosis& d = *s.diagnosis;
    j["diagnosis"] = {{"incidentId", d.incident_id}, {"numeric", d.numeric},
                      {"stage", ToString(d.stage)},  {"round", d.round},
                      {"stageStartedAt", Time(d.stage_started_at)}, {"portBase", d.port_base},
                      {"outcomes", d.outcomes}};
  }
  json fail_slows = json::array();
  for (const FailSlowFinding& f : s.fail_slows) {
    fail_slows.push_back({{"id", f.id}, {"state", ToString(f.state)}, {"kind", ToString(f.kind)}, {"ranks", f.ranks},
                          {"group", f.group}, {"machines", f.machines}, {"severity", f.severity}, {"tier", ToString(f.tier)},
                          {"healthyIterationSeconds", f.healthy_iteration_seconds},
                          {"slowIterationSeconds", f.slow_iteration_seconds}, {"onset", Time(f.onset)},
                          {"detectedAt", Time(f.detected_at)}, {"localizedAt", Time(f.localized_at)},
                          {"endedAt", Time(f.ended_at)}, {"detail", f.detail}});
    if (f.validation.state != ValidationState::kNotStarted) {
      const FailSlowValidation& v = f.validation;
      fail_slows.back()["validation"] = {
          {"state", ToString(v.state)}, {"pass", v.pass}, {"verdict", ToString(v.verdict)},
          {"startedAt", Time(v.started_at)}, {"phaseStartedAt", Time(v.phase_started_at)},
          {"endedAt", Time(v.ended_at)}, {"machines", v.machines},
          {"linkKinds", v.link_kinds},  {"masterAddr", v.master_addr},
          {"masterPort", v.master_port}, {"slowGpus", v.slow_gpus},
          {"slowLinks", v.slow_links},  {"detail", v.detail}};
    }
    if (f.mitigation.strategy_started_at != 0) {
      const FailSlowMitigationRecord& m = f.mitigation;
      json unavailable = json::array();
      for (MitigationStrategy u : m.reported_unavailable) unavailable.push_back(ToString(u));
      fail_slows.back()["mitigation"] = {
          {"strategy", ToString(m.strategy)},    {"strategyStartedAt", Time(m.strategy_started_at)},
          {"accountedUntil", Time(m.accounted_until)}, {"lossRate", m.loss_rate},
          {"lossSeconds", m.loss_seconds},       {"reportedUnavailable", unavailable},
          {"blocker", Bounded(m.blocker)},       {"costSeconds", m.cost_seconds},
          {"costSource", Bounded(m.cost_source)}, {"breakEvenAt", Time(m.break_even_at)},
          {"replaceMachines", m.replace_machines}, {"incidentId", m.incident_id},
          {"stoppedAt", Time(m.stopped_at)},     {"detail", Bounded(m.detail)}};
      const MicroBatchPlanRecord& p = m.microbatch_plan;
      if (p.plan_id != 0 || !p.reported.empty()) {
        fail_slows.back()["mitigation"]["microBatchPlan"] = {
            {"planId", p.plan_id},
            {"attempt", p.attempt},
            {"fromStep", p.from_step},
            {"counts", p.counts},
            {"gradientScale", p.gradient_scale},
            {"globalMicroBatches", p.global_micro_batches},
            {"secondsPerMicroBatch", p.seconds_per_micro_batch},
            {"predictedStepSeconds", p.predicted_step_seconds},
            {"previousStepSeconds", p.previous_step_seconds},
            {"decidedAt", Time(p.decided_at)},
            {"inForceAt", Time(p.in_force_at)},
            {"plans", p.plans},
            {"clearedAt", Time(p.cleared_at)},
            {"clearedReason", Bounded(p.cleared_reason)},
            {"failed", Bounded(p.failed)},
            {"reported", Bounded(p.reported)}};
      }
    }
  }
  j["failSlows"] = fail_slows;
  j["nextFailSlowId"] = s.next_fail_slow_id;
  j["stackDiagnosis"] = StackDiagnosisToJson(s.stack_diagnosis);
  j["checkpoint"] = CheckpointToJson(s.checkpoint, s.slots);
  // Incident signals quote process output, which need not be UTF-8: replace, never throw.
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<JobStatus> JobStatusFromJson(const std::string& text) {
  try {
    const json j = json::parse(text);
    JobStatus s;
    s.phase = PhaseFromName(j.at("phase").get<std::string>());
    s.observed_generation = IntValue<int64_t>(j, "observedGeneration", 0);
    for (const json& c : j.value("conditions", json::array())) {
      Condition condition{c.at("type"), ConditionStatus::kUnknown, c.value("reason", ""), c.value("message", ""),
                          IntValue<int64_t>(c, "observedGeneration", 0), ParseTime(c, "lastTransitionTime")};
      c.at("status");  // required
      ReadEnum(c, "status", ParseConditionStatus, "conditions[].status", &condition.status);
      s.conditions.push_back(std::move(condition));
    }
    s.attempt = IntValue<uint64_t>(j, "attempt", 0);
    s.resume_step = IntValue<uint64_t>(j, "resumeStep", 0);
    s.attempt_started_at = ParseTime(j, "attemptStartedAt");
    s.first_step_seconds = j.value("firstStepSeconds", 0.0);
    s.master_addr = j.value("masterAddr", "");
    s.master_port = IntValue<uint32_t>(j, "masterPort", 0);
    if (j.contains("codeVersion")) s.code = CodeFromJson(j["codeVersion"]);
    for (const json& v : j.value("versionHistory", json::array())) {
      VersionRecord record;
      record.code = CodeFromJson(v.at("codeVersion"));
      record.applied_at = ParseTime(v, "appliedAt");
      record.reason = v.value("reason", "");
      ReadEnum(v, "outcome", ParseVersionOutcome, "versionHistory[].outcome", &record.outcome);
      record.applied_at_step = IntValue<uint64_t>(v, "appliedAtStep", 0);
      s.version_history.push_back(std::move(record));
    }
    if (j.contains("pendingCode")) {
      s.pending_code = CodeFromJson(j["pendingCode"]);
      s.pending_code_since = ParseTime(j, "pendingCodeSince");
    }
    for (const json& a : j.value("networkAlarms", json::array())) {
      s.network_alarms.push_back(NetworkAlarmRecord{a.value("machineId", ""), ParseTime(a, "at"), a.value("summary", "")});
    }
    if (j.contains("machineTable")) s.slots = MachineTableFromJson(j["machineTable"]);
    for (const json& m : j.value("machines", json::array())) {
      s.slots.push_back(SlotStatus{CheckedInt<int>(m.at("index"), "index"), m.at("pod"), m.value("machineId", ""), m.value("observed", false)});
      s.slots.back().node_unready_since = ParseTime(m, "nodeUnreadySince");
      s.slots.back().node_unready_step = IntValue<uint64_t>(m, "nodeUnreadyStep", 0);
      s.slots.back().node_unready_progress_at = ParseTime(m, "nodeUnreadyProgressAt");
    }
    const json standby = j.value("standby", json::object());
    s.standby_desired = IntValue<int>(standby, "desired", 0);
    s.standby_ready = IntValue<int>(standby, "ready", 0);
    for (const json& m : standby.value("pods", json::array())) {
      s.standbys.push_back(StandbyStatus{m.at("pod"), m.value("machineId", ""), m.value("observed", false)});
      s.standbys.back().node_unready_since = ParseTime(m, "nodeUnreadySince");
    }
    s.last_completed_step = IntValue<uint64_t>(j, "lastCompletedStep", 0);
    s.max_completed_step = IntValue<uint64_t>(j, "maxCompletedStep", 0);
    s.mean_iteration_seconds = j.value("meanIterationSeconds", 0.0);
    s.started_at = ParseTime(j, "startedAt");
    s.finished_at = ParseTime(j, "finishedAt");
    s.training_time_lost_seconds = j.value("trainingTimeLostSeconds", 0.0);
    s.ettr = j.value("ettr", 1.0);
    for (const json& i : j.value("incidents", json::array())) {
      Incident inc;
      inc.id = CheckedInt<decltype(inc.id)>(i.at("id"), "id");
      ReadEnum(i, "kind", ParseIncidentKind, "incidents[].kind", &inc.kind);
      inc.signal = i.value("signal", "");
      inc.detected_at = ParseTime(i, "detectedAt");
      inc.decided_at = ParseTime(i, "decidedAt");
      inc.resumed_at = ParseTime(i, "resumedAt");
      inc.machines = i.value("machines", std::vector<std::string>{});  // the first kMaxStoredIncidentMachines
      const uint64_t machines_count = IntValue<uint64_t>(i, "machinesCount", inc.machines.size());
      if (machines_count < inc.machines.size()) {
        throw std::invalid_argument(absl::StrCat("incidents[].machinesCount: ", machines_count, " is less than the ",
                                                 inc.machines.size(), " machines named"));
      }
      inc.machines_not_named = machines_count - inc.machines.size();
      inc.decision = i.value("decision", "");
      inc.actions = i.value("actions", std::vector<std::string>{});
      inc.step_at_failure = IntValue<uint64_t>(i, "stepAtFailure", 0);
      inc.resume_step = IntValue<uint64_t>(i, "resumeStep", 0);
      inc.steps_redone = IntValue<uint64_t>(i, "stepsRedone", 0);
      inc.training_time_lost_seconds = i.value("trainingTimeLostSeconds", 0.0);
      if (i.contains("diagnosis")) inc.diagnosis = StagesFromJson(i["diagnosis"]);
      s.incidents.push_back(std::move(inc));
    }
    for (const json& e : j.value("evictedMachines", json::array())) {
      std::string reason = e.value("reason", "");
      if (e.value("reasonIsIncidentSignal", false)) {
        const uint64_t id = IntValue<uint64_t>(e, "incidentId", 0);
        auto inc = std::find_if(s.incidents.begin(), s.incidents.end(), [&](const Incident& i) { return i.id == id; });
        if (inc == s.incidents.end()) {
          throw std::invalid_argument(absl::StrCat("evictedMachines[].reasonIsIncidentSignal: incident ", id, " is not in incidents"));
        }
        reason = inc->signal;
      }
      s.evicted.push_back(Eviction{e.value("machineId", ""), e.value("pod", ""), reason, ParseTime(e, "at"),
                                   e.value("quarantined", false)});
      s.evicted.back().machine_fault = e.value("machineFault", true);
      s.evicted.back().incident_id = IntValue<uint64_t>(e, "incidentId", 0);
    }
    for (const json& c : j.value("cordons", json::array())) {
      CordonRecord record;
      record.node = c.at("node").get<std::string>();
      if (record.node.empty()) throw std::invalid_argument("cordons[].node: empty");
      record.reason = c.value("reason", "");
      record.at = ParseTime(c, "at");
      record.incident_id = IntValue<uint64_t>(c, "incidentId", 0);
      record.by_peregrine = c.value("byPeregrine", true);
      s.cordons.push_back(std::move(record));
    }
    s.cordons_dropped = IntValue<uint64_t>(j, "cordonsDropped", 0);
    if (j.contains("suspension") && j["suspension"].is_object()) {
      const json& u = j["suspension"];
      SuspensionStatus suspension;
      suspension.reason = u.value("reason", "");
      suspension.message = u.value("message", "");
      suspension.requested_at = ParseTime(u, "requestedAt");
      suspension.persisted_before = IntValue<uint64_t>(u, "persistedBefore", 0);
      suspension.suspended_at = ParseTime(u, "suspendedAt");
      s.suspension = std::move(suspension);
    }
    s.next_incident_id = IntValue<uint64_t>(j, "nextIncidentId", 1);
    s.next_pod_serial = IntValue<uint64_t>(j, "nextPodSerial", 0);
    s.recoveries = IntValue<int>(j, "recoveries", 0);
    s.reattempts = IntValue<int>(j, "reattempts", 0);
    s.triage_deadline = ParseTime(j, "triageDeadline");
    s.rollbacks = IntValue<int>(j, "rollbacks", 0);
    if (j.contains("lossReference")) {
      const json& l = j["lossReference"];
      s.loss_reference.losses = l.value("losses", std::vector<double>{});
      s.loss_reference.grad_norms = l.value("gradNorms", std::vector<double>{});
      s.loss_reference.step = IntValue<uint64_t>(l, "step", 0);
    }
    if (j.contains("diagnosis")) {
      const json& d = j["diagnosis"];
      StopTimeDiagnosis x;
      x.incident_id = CheckedInt<uint64_t>(d.at("incidentId"), "incidentId");
      x.numeric = d.value("numeric", false);
      ReadRequiredEnum(d, "stage", ParseStopTimeStage, "diagnosis.stage", &x.stage);
      x.round = IntValue<int>(d, "round", 0);
      x.stage_started_at = ParseTime(d, "stageStartedAt");
      x.port_base = IntValue<uint32_t>(d, "portBase", 0);
      x.outcomes = d.value("outcomes", std::map<std::string, std::string>{});
      s.diagnosis = std::move(x);
    }
    for (const json& f : j.value("failSlows", json::array())) {
      FailSlowFinding x;
      x.id = CheckedInt<decltype(x.id)>(f.at("id"), "id");
      ReadEnum(f, "state", ParseFailSlowState, "failSlows[].state", &x.state);
      ReadEnum(f, "kind", ParseFailSlowKind, "failSlows[].kind", &x.kind);
      x.ranks = IntVector<int>(f, "ranks");
      x.group = f.value("group", "");
      x.machines = f.value("machines", std::vector<std::string>{});
      x.severity = f.value("severity", 0.0);
      ReadEnum(f, "tier", ParseFailSlowTier, "failSlows[].tier", &x.tier);
      x.healthy_iteration_seconds = f.value("healthyIterationSeconds", 0.0);
      x.slow_iteration_seconds = f.value("slowIterationSeconds", 0.0);
      x.onset = ParseTime(f, "onset");
      x.detected_at = ParseTime(f, "detectedAt");
      x.localized_at = ParseTime(f, "localizedAt");
      x.ended_at = ParseTime(f, "endedAt");
      x.detail = f.value("detail", "");
      if (f.contains("validation")) {
        const json& v = f.at("validation");
        FailSlowValidation& y = x.validation;
        ReadEnum(v, "state", ParseValidationState, "failSlows[].validation.state", &y.state);
        y.pass = IntValue<int>(v, "pass", 0);
        ReadEnum(v, "verdict", ParseValidationVerdict, "failSlows[].validation.verdict", &y.verdict);
        y.started_at = ParseTime(v, "startedAt");
        y.phase_started_at = ParseTime(v, "phaseStartedAt");
        y.ended_at = ParseTime(v, "endedAt");
        y.machines = v.value("machines", std::vector<std::string>{});
        y.link_kinds = v.value("linkKinds", "");
        y.master_addr = v.value("masterAddr", "");
        y.master_port = IntValue<uint32_t>(v, "masterPort", 0);
        y.slow_gpus = IntVector<int>(v, "slowGpus");
        y.slow_links = v.value("slowLinks", std::vector<std::string>{});
        y.detail = v.value("detail", "");
      }
      if (f.contains("mitigation")) {
        const json& m = f.at("mitigation");
        FailSlowMitigationRecord& y = x.mitigation;
        ReadEnum(m, "strategy", ParseMitigationStrategy, "failSlows[].mitigation.strategy", &y.strategy);
        y.strategy_started_at = ParseTime(m, "strategyStartedAt");
        y.accounted_until = ParseTime(m, "accountedUntil");
        y.loss_rate = m.value("lossRate", 0.0);
        y.loss_seconds = m.value("lossSeconds", 0.0);
        for (const json& u : m.value("reportedUnavailable", json::array())) {
          MitigationStrategy strategy = MitigationStrategy::kIgnore;
          ReadEnum(json{{"s", u}}, "s", ParseMitigationStrategy, "failSlows[].mitigation.reportedUnavailable[]",
                   &strategy);
          y.reported_unavailable.push_back(strategy);
        }
        y.blocker = m.value("blocker", "");
        y.cost_seconds = m.value("costSeconds", 0.0);
        y.cost_source = m.value("costSource", "");
        y.break_even_at = ParseTime(m, "breakEvenAt");
        y.replace_machines = m.value("replaceMachines", std::vector<std::string>{});
        y.incident_id = IntValue<uint64_t>(m, "incidentId", 0);
        y.stopped_at = ParseTime(m, "stoppedAt");
        y.detail = m.value("detail", "");
        if (m.contains("microBatchPlan")) {
          const json& p = m.at("microBatchPlan");
          MicroBatchPlanRecord& z = y.microbatch_plan;
          z.plan_id = IntValue<uint64_t>(p, "planId", 0);
          z.attempt = IntValue<uint64_t>(p, "attempt", 0);
          z.from_step = IntValue<uint64_t>(p, "fromStep", 0);
          z.counts = IntVector<int64_t>(p, "counts");
          z.gradient_scale = p.value("gradientScale", 0.0);
          z.global_micro_batches = IntValue<int64_t>(p, "globalMicroBatches", 0);
          z.seconds_per_micro_batch = p.value("secondsPerMicroBatch", std::vector<double>{});
          z.predicted_step_seconds = p.value("predictedStepSeconds", 0.0);
          z.previous_step_seconds = p.value("previousStepSeconds", 0.0);
          z.decided_at = ParseTime(p, "decidedAt");
          z.in_force_at = ParseTime(p, "inForceAt");
          z.plans = IntValue<int>(p, "plans", 0);
          z.cleared_at = ParseTime(p, "clearedAt");
          z.cleared_reason = p.value("clearedReason", "");
          z.failed = p.value("failed", "");
          z.reported = p.value("reported", "");
        }
      }
      s.fail_slows.push_back(std::move(x));
    }
    s.next_fail_slow_id = IntValue<uint64_t>(j, "nextFailSlowId", 1);
    if (j.contains("stackDiagnosis")) s.stack_diagnosis = StackDiagnosisFromJson(j["stackDiagnosis"]);
    if (j.contains("checkpoint")) s.checkpoint = CheckpointFromJson(j["checkpoint"], s.slots);
    return s;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job status: ", e.what()));
  }
}

}  // namespace peregrine
