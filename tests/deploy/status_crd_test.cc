// The status the controller really writes (peregrine::JobStatusToJson, the body
// KubeCluster::PersistStatus PUTs to the status subresource) against the CRD's status
// schema. A real API server prunes every field the structural schema does not declare
// and rejects a write that violates it (wedging the job's status); the validator here
// reports undeclared fields as errors instead, so a key status_json.cc writes without a
// CRD declaration fails this suite rather than silently losing resume state.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/openapi_validator.h"

namespace peregrine {
namespace {

YAML::Node StatusSchema() {
  const YAML::Node crd = YAML::LoadFile((SourceDir() / "crds/peregrine.dev_trainingjobs.yaml").string());
  for (const YAML::Node& v : crd["spec"]["versions"]) {
    if (v["name"].Scalar() == "v1alpha1") return v["schema"]["openAPIV3Schema"]["properties"]["status"];
  }
  FAIL("no v1alpha1 version in the CRD");
  return {};
}

// JSON is YAML: numbers stay plain (typed int/float), strings stay quoted.
std::string Violations(const JobStatus& status) {
  YAML::Node object = YAML::Load(JobStatusToJson(status));
  return absl::StrJoin(ValidateAgainstSchema(StatusSchema(), object), "\n");
}

constexpr int64_t kT0 = 1'735'787'045'123'456'000;  // 2025-01-02T03:04:05.123456Z
constexpr int64_t kSecond = 1'000'000'000;

CodeVersionSpec Code(const std::string& revision) {
  CodeVersionSpec c;
  c.image = "registry.example/llm-train:" + revision;
  c.command = {"torchrun", "train.py", "--lr", "3e-4"};
  c.revision = revision;
  c.env = {{"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "8"}};
  return c;
}

// A job mid-recovery with every field JobStatus has set to a non-default value: two
// machines (one replaced by a standby), a pool refilling, a closed and an open
// incident, an eviction, a rollback in the version history, a localized fail-slow.
JobStatus Populated() {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  s.observed_generation = 4;
  s.conditions = {
      {"Valid", ConditionStatus::kTrue, "SpecValid", "the spec is valid", 4, kT0},
      {"Ready", ConditionStatus::kFalse, "Recovering", "phase Recovering, attempt 3, step 1200", 4, kT0 + 600 * kSecond},
      {"Degraded", ConditionStatus::kTrue, "MachineFault", "incident 2: Xid 79 on node-7", 4, kT0 + 600 * kSecond},
      {"StandbyReady", ConditionStatus::kFalse, "PoolFilling", "0 of 1 standbys ready", 4, kT0 + 601 * kSecond},
  };
  s.attempt = 3;
  s.resume_step = 1150;
  s.attempt_started_at = kT0 + 602 * kSecond;
  s.master_addr = "llm-0.llm-rdzv.team-a.svc";
  s.master_port = 29500;
  s.code = Code("v2");
  s.version_history = {{Code("v1"), kT0, "Created", VersionOutcome::kHealthy, 0},
                       {Code("v2"), kT0 + 300 * kSecond, "HotUpdate", VersionOutcome::kRunning, 900}};
  s.slots = {{0, "llm-p0", "node-1", true}, {1, "llm-p5", "node-9", true}};
  s.standbys = {{"llm-p6", "", false}};
  s.standby_desired = 1;
  s.standby_ready = 0;
  s.last_completed_step = 1200;
  s.max_completed_step = 1203;
  s.mean_iteration_seconds = 1.75;
  s.started_at = kT0;
  s.finished_at = 0;
  s.training_time_lost_seconds = 84.5;
  s.ettr = 0.93;
  Incident closed;
  closed.id = 1;
  closed.kind = IncidentKind::kProcessCrash;
  closed.signal = "rank 3 exited with code 1";
  closed.detected_at = kT0 + 100 * kSecond;
  closed.decided_at = kT0 + 101 * kSecond;
  closed.resumed_at = kT0 + 130 * kSecond;
  closed.machines = {"node-2"};
  closed.decision = "reattempt";
  closed.actions = {"RestartInPlace"};
  closed.step_at_failure = 400;
  closed.resume_step = 350;
  closed.training_time_lost_seconds = 42;
  Incident open;
  open.id = 2;
  open.kind = IncidentKind::kMachineFault;
  open.signal = "Xid 79 on node-7";
  open.detected_at = kT0 + 600 * kSecond;
  open.decided_at = kT0 + 601 * kSecond;
  open.machines = {"node-7"};
  open.decision = "evict+standby";
  open.actions = {"Evict", "ActivateStandby", "RestartInPlace"};
  open.step_at_failure = 1203;
  open.resume_step = 1150;
  open.training_time_lost_seconds = 42.5;
  DiagnosisStageRecord stage;
  stage.stage = "all_gather";
  stage.started_at = kT0 + 602 * kSecond;
  stage.finished_at = kT0 + 603 * kSecond;
  stage.verdict = StageVerdict::kFailed;
  stage.failed_machines = {"node-7"};
  stage.results = {"round 0: node-7: FAILED: contributions arrived wrong [algbw_gbps=1.2]"};
  stage.note = "majority digest ab12";
  open.diagnosis = {stage};
  s.incidents = {closed, open};
  s.evicted = {{"node-7", "llm-p1", "Xid 79", kT0 + 601 * kSecond}};
  s.next_incident_id = 3;
  s.next_pod_serial = 7;
  s.recoveries = 2;
  s.reattempts = 1;
  s.triage_deadline = kT0 + 605 * kSecond;
  FailSlowFinding f;
  f.id = 1;
  f.state = FailSlowState::kLocalized;
  f.kind = FailSlowKind::kCommunication;
  f.ranks = {8, 9, 10, 11};
  f.group = "dp 1";
  f.machines = {"node-3"};
  f.severity = 0.6;
  f.tier = FailSlowTier::kMitigate;
  f.healthy_iteration_seconds = 1.7;
  f.slow_iteration_seconds = 2.72;
  f.onset = kT0 + 200 * kSecond;
  f.detected_at = kT0 + 210 * kSecond;
  f.localized_at = kT0 + 230 * kSecond;
  f.ended_at = kT0 + 290 * kSecond;
  f.detail = "dp 1 allreduce 1.6x slower than dp 0";
  f.validation.state = ValidationState::kDone;
  f.validation.pass = 2;
  f.validation.verdict = ValidationVerdict::kConfirmed;
  f.validation.started_at = kT0 + 231 * kSecond;
  f.validation.phase_started_at = kT0 + 233 * kSecond;
  f.validation.ended_at = kT0 + 234 * kSecond;
  f.validation.machines = {"node-2", "node-3"};
  f.validation.link_kinds = "dp";
  f.validation.master_addr = "llm-p0.llm";
  f.validation.master_port = 29600;
  f.validation.slow_gpus = {9};
  f.validation.slow_links = {"dp 8->10"};
  f.validation.detail = "dp links (16), median 9.8 GB/s: slow 8->10 1.1 GB/s = 8.9x the median time";
  s.fail_slows = {f};
  s.next_fail_slow_id = 2;
  s.network_alarms = {{"node-4", kT0 + 500 * kSecond, "eth0 link down"}};
  s.pending_code = Code("v3");
  s.pending_code_since = kT0 + 550 * kSecond;
  s.rollbacks = 1;
  s.loss_reference.losses = {2.5, 2.25};
  s.loss_reference.grad_norms = {1.5, 1.25};
  s.loss_reference.step = 1203;
  StopTimeDiagnosis d;
  d.incident_id = 2;
  d.numeric = true;
  d.stage = "replay";
  d.round = 1;
  d.stage_started_at = kT0 + 604 * kSecond;
  d.port_base = 41000;
  d.outcomes = {{"0/0", "ab12"}, {"0/1", "failed"}};
  s.diagnosis = d;
  return s;
}

TEST_CASE("the status the controller writes is fully declared by the CRD", "[unit]") {
  const JobStatus s = Populated();
  INFO(JobStatusToJson(s, 2));
  CHECK(Violations(s) == "");
}

TEST_CASE("a fresh job's status (every time unset, written as \"\") is valid", "[unit]") {
  JobStatus s;  // what the controller writes on its first round: Pending, nothing observed
  s.slots = {{0, "llm-p0", "", false}};
  s.standbys = {{"llm-p1", "", false}};
  s.standby_desired = 1;
  Incident triaging;  // an incident still triaging: decidedAt and resumedAt unset
  triaging.id = 1;
  triaging.kind = IncidentKind::kMachineLost;
  triaging.detected_at = kT0;
  s.incidents = {triaging};
  s.evicted = {{"node-7", "", "NotReady", 0}};
  FailSlowFinding profiling;  // still profiling: nothing localized or ended
  profiling.id = 1;
  profiling.state = FailSlowState::kProfiling;
  s.fail_slows = {profiling};
  s.version_history = {{Code("v1"), 0, "Created", VersionOutcome::kRunning, 0}};
  INFO(JobStatusToJson(s, 2));
  CHECK(Violations(s) == "");
}

TEST_CASE("the status schema still rejects what the API server would", "[unit]") {
  JobStatus s = Populated();
  SECTION("a time that is neither RFC 3339 nor empty") {
    YAML::Node object = YAML::Load(JobStatusToJson(s));
    object["startedAt"] = "yesterday";
    object["incidents"][0]["detectedAt"] = "2025-01-02 03:04:05";
    const std::string errors = absl::StrJoin(ValidateAgainstSchema(StatusSchema(), object), "\n");
    CHECK_THAT(errors, Catch::Contains("startedAt: \"yesterday\" does not match the pattern"));
    CHECK_THAT(errors, Catch::Contains("incidents[0].detectedAt: \"2025-01-02 03:04:05\" does not match"));
  }
  SECTION("a key the schema does not declare (the API server would prune it)") {
    YAML::Node object = YAML::Load(JobStatusToJson(s));
    object["machines"][0]["lastSeen"] = "node-1";
    object["standby"]["pods"][0]["state"] = "Ready";
    object["resumeFrom"] = 3;
    const std::string errors = absl::StrJoin(ValidateAgainstSchema(StatusSchema(), object), "\n");
    CHECK_THAT(errors, Catch::Contains("machines[0].lastSeen: unknown field"));
    CHECK_THAT(errors, Catch::Contains("standby.pods[0].state: unknown field"));
    CHECK_THAT(errors, Catch::Contains("resumeFrom: unknown field"));
  }
  SECTION("a condition without a reason, ETTR and masterPort out of range") {
    s.conditions[0].reason = "";
    s.ettr = 1.5;
    s.master_port = 70000;
    const std::string errors = Violations(s);
    CHECK_THAT(errors, Catch::Contains("conditions[0].reason: must be at least 1 characters"));
    CHECK_THAT(errors, Catch::Contains("ettr: must be <= 1"));
    CHECK_THAT(errors, Catch::Contains("masterPort: must be <= 65535"));
  }
}

TEST_CASE("every status key the schema declares has a type and a description", "[unit]") {
  CHECK(absl::StrJoin(CheckStructuralSchema(StatusSchema()), "\n") == "");
}

}  // namespace
}  // namespace peregrine
