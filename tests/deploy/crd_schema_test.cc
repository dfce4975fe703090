// The TrainingJob CRD (crds/peregrine.dev_trainingjobs.yaml): its shape, its schema's
// agreement with controller/job_spec.h, and every example manifest validated against
// it with the OpenAPI v3 validator in openapi_validator.h (the schema half of "every
// example is a valid TrainingJob"; the controller's parser is the other half).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/core/job_spec.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = PEREGRINE_SOURCE_DIR;

YAML::Node Demo() { return YAML::LoadFile((kSourceDir / "examples/local-demo.yaml").string()); }

std::string Joined(const std::vector<std::string>& errors) { return absl::StrJoin(errors, "\n"); }

// Validates `doc` and returns all errors joined by newlines.
std::string Errors(YAML::Node doc) {
  const YAML::Node schema = TrainingJobSchema();
  return Joined(ValidateAgainstSchema(schema, doc));
}

TEST_CASE("CRD names, scope, subresources and printer columns", "[unit]") {
  const YAML::Node crd = LoadTrainingJobCrd();
  CHECK(crd["apiVersion"].Scalar() == "apiextensions.k8s.io/v1");
  CHECK(crd["kind"].Scalar() == "CustomResourceDefinition");
  CHECK(crd["metadata"]["name"].Scalar() == "trainingjobs.peregrine.dev");
  const YAML::Node spec = crd["spec"];
  CHECK(spec["group"].Scalar() == "peregrine.dev");
  CHECK(spec["scope"].Scalar() == "Namespaced");
  CHECK(spec["names"]["kind"].Scalar() == "TrainingJob");
  CHECK(spec["names"]["plural"].Scalar() == "trainingjobs");
  CHECK(spec["names"]["shortNames"][0].Scalar() == "tj");
  REQUIRE(spec["versions"].size() == 1);
  const YAML::Node v = spec["versions"][0];
  CHECK(v["name"].Scalar() == "v1alpha1");
  CHECK(v["served"].as<bool>());
  CHECK(v["storage"].as<bool>());
  CHECK(v["subresources"]["status"].IsMap());
  std::vector<std::string> columns;
  for (const YAML::Node& c : v["additionalPrinterColumns"]) {
    columns.push_back(c["name"].Scalar() + "=" + c["jsonPath"].Scalar());
  }
  CHECK(columns == std::vector<std::string>{
                       "Phase=.status.phase", "Machines=.spec.machines",
                       "Standby-Ready=.status.standby.ready", "Standby-Desired=.status.standby.desired",
                       "ETTR=.status.ettr", "Incident=.status.conditions[?(@.type==\"Degraded\")].reason",
                       "Age=.metadata.creationTimestamp"});
}

TEST_CASE("CRD schema is structural, documented, and its defaults are valid", "[unit]") {
  const std::vector<std::string> errors = CheckStructuralSchema(TrainingJobSchema());
  INFO(Joined(errors));
  CHECK(errors.empty());
}

// Collects "path=default" for every property with a default, and every property path.
void Walk(const YAML::Node& schema, const std::string& path, std::set<std::string>& paths,
          std::set<std::string>& defaults) {
  if (!schema["properties"]) return;
  for (const auto& kv : schema["properties"]) {
    const std::string p = path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar();
    paths.insert(p);
    if (kv.second["default"] && kv.second["default"].IsScalar()) {
      defaults.insert(p + "=" + kv.second["default"].Scalar());
    }
    Walk(kv.second, p, paths, defaults);
  }
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

TEST_CASE("CRD spec describes exactly the fields and defaults of controller/job_spec.h", "[unit]") {
  const YAML::Node spec_schema = TrainingJobSchema()["properties"]["spec"];
  std::set<std::string> paths, defaults;
  Walk(spec_schema, "", paths, defaults);
  const std::set<std::string> expected_paths = {
      "machines", "gpusPerMachine", "parallelism", "parallelism.tensor", "parallelism.pipeline",
      "parallelism.data", "launch", "codeVersion", "codeVersion.image", "codeVersion.command",
      "codeVersion.revision", "codeVersion.env", "template", "standby", "standby.dailyFailureRate",
      "standby.replenishHorizonHours", "standby.percentile", "standby.min", "standby.max",
      "faultTolerance", "faultTolerance.networkAlarmWindowSeconds", "faultTolerance.networkAlarmsToEvict",
      "faultTolerance.maxReattempts", "faultTolerance.lossSpikeFactor", "faultTolerance.hotUpdateWindowHours",
      "faultTolerance.restartGraceSeconds", "faultTolerance.heartbeatTimeoutSeconds",
      "faultTolerance.maxRecoveries", "faultTolerance.hangTimeoutSeconds",
      "faultTolerance.nodeUnreachableGraceSeconds", "faultTolerance.startTimeoutSeconds",
      "faultTolerance.exitRules", "failSlow", "failSlow.enabled", "failSlow.changePointProbability",
      "failSlow.verifyThreshold", "failSlow.suspiciousGroupRatio", "failSlow.mitigateThreshold",
      "failSlow.replaceThreshold", "failSlow.mitigation", "checkpoint", "checkpoint.intervalSteps",
      "checkpoint.backupCopies", "checkpoint.memoryLimit", "checkpoint.backupBandwidth",
      "checkpoint.persistEverySteps", "checkpoint.persistPath", "suspend"};
  CHECK(paths == expected_paths);

  // The defaults are the struct's default member initialisers, printed the same way.
  const TrainingJobSpec d;
  const std::set<std::string> expected_defaults = {
      "parallelism.tensor=" + Num(d.parallelism.tensor),
      "parallelism.pipeline=" + Num(d.parallelism.pipeline),
      "parallelism.data=" + Num(d.parallelism.data),
      std::string("launch=") + (d.launch == LaunchMode::kPerGpu ? "PerGPU" : "PerMachine"),
      "standby.dailyFailureRate=" + Num(d.standby.daily_failure_rate),
      "standby.replenishHorizonHours=" + Num(d.standby.replenish_horizon_hours),
      "standby.percentile=" + Num(d.standby.percentile),
      "standby.min=" + Num(d.standby.min),
      "standby.max=" + Num(d.standby.max),
      "faultTolerance.networkAlarmWindowSeconds=" + Num(d.fault_tolerance.network_alarm_window_seconds),
      "faultTolerance.networkAlarmsToEvict=" + Num(d.fault_tolerance.network_alarms_to_evict),
      "faultTolerance.maxReattempts=" + Num(d.fault_tolerance.max_reattempts),
      "faultTolerance.lossSpikeFactor=" + Num(d.fault_tolerance.loss_spike_factor),
      "faultTolerance.hotUpdateWindowHours=" + Num(d.fault_tolerance.hot_update_window_hours),
      "faultTolerance.restartGraceSeconds=" + Num(d.fault_tolerance.restart_grace_seconds),
      "faultTolerance.heartbeatTimeoutSeconds=" + Num(d.fault_tolerance.heartbeat_timeout_seconds),
      "faultTolerance.maxRecoveries=" + Num(d.fault_tolerance.max_recoveries),
      "faultTolerance.hangTimeoutSeconds=" + Num(d.fault_tolerance.hang_timeout_seconds),
      "faultTolerance.nodeUnreachableGraceSeconds=" + Num(d.fault_tolerance.node_unreachable_grace_seconds),
      "faultTolerance.startTimeoutSeconds=" + Num(d.fault_tolerance.start_timeout_seconds),
      std::string("failSlow.enabled=") + (d.fail_slow.enabled ? "true" : "false"),
      "failSlow.changePointProbability=" + Num(d.fail_slow.change_point_probability),
      "failSlow.verifyThreshold=" + Num(d.fail_slow.verify_threshold),
      "failSlow.suspiciousGroupRatio=" + Num(d.fail_slow.suspicious_group_ratio),
      "failSlow.mitigateThreshold=" + Num(d.fail_slow.mitigate_threshold),
      "failSlow.replaceThreshold=" + Num(d.fail_slow.replace_threshold),
      std::string("failSlow.mitigation=") + (d.fail_slow.mitigation == FailSlowMitigation::kAuto ? "Auto" : "MonitorOnly"),
      "checkpoint.intervalSteps=" + Num(d.checkpoint.interval_steps),
      "checkpoint.backupCopies=" + Num(d.checkpoint.backup_copies),
      "checkpoint.persistEverySteps=" + Num(d.checkpoint.persist_every_steps),
      std::string("suspend=") + (d.suspend ? "true" : "false"),
  };
  // Normalise the CRD's numbers through double so "0.10" and "0.1" compare equal.
  std::set<std::string> normalised;
  for (const std::string& entry : defaults) {
    const std::string key = entry.substr(0, entry.find('='));
    const std::string value = entry.substr(entry.find('=') + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    normalised.insert(key + "=" + (end != value.c_str() && *end == '\0' ? Num(v) : value));
  }
  CHECK(normalised == expected_defaults);
  // Required fields are the ones job_spec.h marks "(required)".
  std::vector<std::string> required;
  for (const YAML::Node& r : spec_schema["required"]) required.push_back(r.Scalar());
  std::sort(required.begin(), required.end());
  CHECK(required == std::vector<std::string>{"codeVersion", "gpusPerMachine", "machines", "parallelism"});
  CHECK(spec_schema["properties"]["codeVersion"]["required"][0].Scalar() == "command");
}

TEST_CASE("validation applies the CRD's defaults like the API server", "[unit]") {
  YAML::Node doc = YAML::Load(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: tiny}
spec:
  machines: 2
  gpusPerMachine: 4
  parallelism: {tensor: 4, data: 2}
  codeVersion: {command: [train]}
)");
  CHECK(Errors(doc) == "");
  CHECK(doc["spec"]["parallelism"]["pipeline"].as<int>() == 1);
  CHECK(doc["spec"]["standby"]["percentile"].as<double>() == 0.99);
  CHECK(doc["spec"]["failSlow"]["mitigation"].Scalar() == "Auto");
  CHECK(doc["spec"]["checkpoint"]["backupCopies"].as<int>() == 1);
  CHECK(doc["spec"]["launch"].Scalar() == "PerGPU");
}

TEST_CASE("invalid manifests fail with a message naming the field", "[unit]") {
  SECTION("unknown field") {
    YAML::Node doc = Demo();
    doc["spec"]["standby"]["minimum"] = 1;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.standby.minimum: unknown field"));
  }
  SECTION("misspelt top-level spec field") {
    YAML::Node doc = Demo();
    doc["spec"]["gpuPerMachine"] = 2;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.gpuPerMachine: unknown field"));
  }
  SECTION("unknown exit-rule action") {
    YAML::Node doc = Demo();
    doc["spec"]["faultTolerance"]["exitRules"] = YAML::Load("[{action: Retry, exitCodes: [1]}]");
    CHECK_THAT(Errors(doc), Catch::Contains("spec.faultTolerance.exitRules[0].action"));
  }
  SECTION("wrong type") {
    YAML::Node doc = Demo();
    doc["spec"]["parallelism"]["tensor"] = "two";
    CHECK_THAT(Errors(doc), Catch::Contains("spec.parallelism.tensor: must be of type integer"));
  }
  SECTION("quoted number is a string") {
    YAML::Node doc = YAML::Load(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: q}
spec: {machines: "4", gpusPerMachine: 2, parallelism: {data: 8}, codeVersion: {command: [x]}}
)");
    CHECK_THAT(Errors(doc), Catch::Contains("spec.machines: must be of type integer, got string \"4\""));
  }
  SECTION("parallelism product mismatch") {
    YAML::Node doc = Demo();
    doc["spec"]["machines"] = 5;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.parallelism: parallelism: tensor * pipeline * data must equal"));
  }
  SECTION("standby min > max") {
    YAML::Node doc = Demo();
    doc["spec"]["standby"]["min"] = 3;
    doc["spec"]["standby"]["max"] = 2;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.standby.max: standby.min must be <= standby.max"));
  }
  SECTION("standby min > machines") {
    YAML::Node doc = Demo();
    doc["spec"]["standby"]["min"] = 5;
    doc["spec"]["standby"]["max"] = 8;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.standby.min: standby.min must be <= machines"));
  }
  SECTION("enum") {
    YAML::Node doc = Demo();
    doc["spec"]["launch"] = "PerNode";
    CHECK_THAT(Errors(doc), Catch::Contains("spec.launch: unsupported value string \"PerNode\""));
  }
  SECTION("bounds") {
    YAML::Node doc = Demo();
    doc["spec"]["standby"]["percentile"] = 1.0;
    doc["spec"]["gpusPerMachine"] = 0;
    const std::string errors = Errors(doc);
    CHECK_THAT(errors, Catch::Contains("spec.standby.percentile: must be < 1"));
    CHECK_THAT(errors, Catch::Contains("spec.gpusPerMachine: must be >= 1"));
  }
  SECTION("missing required fields") {
    YAML::Node doc = Demo();
    doc["spec"].remove("codeVersion");
    doc["spec"].remove("machines");
    const std::string errors = Errors(doc);
    CHECK_THAT(errors, Catch::Contains("spec.codeVersion: Required value"));
    CHECK_THAT(errors, Catch::Contains("spec.machines: Required value"));
  }
  SECTION("empty command") {
    YAML::Node doc = Demo();
    doc["spec"]["codeVersion"]["command"] = YAML::Load("[]");
    CHECK_THAT(Errors(doc), Catch::Contains("spec.codeVersion.command: must have at least 1 items"));
    doc["spec"]["codeVersion"]["command"] = YAML::Load("['', '--x']");
    CHECK_THAT(Errors(doc), Catch::Contains("spec.codeVersion.command: codeVersion.command[0]"));
  }
  SECTION("env values are strings") {
    YAML::Node doc = Demo();
    doc["spec"]["codeVersion"]["env"] = YAML::Load("{A: \"1\", B: 2}");
    const std::string errors = Errors(doc);
    CHECK_THAT(errors, Catch::Contains("spec.codeVersion.env.B: must be of type string"));
    CHECK_THAT(errors, !Catch::Contains("spec.codeVersion.env.A"));
  }
  SECTION("name that is not a DNS-1123 label") {
    YAML::Node doc = Demo();
    doc["metadata"]["name"] = "demo.v2";
    CHECK_THAT(Errors(doc), Catch::Contains("metadata.name must be a DNS-1035 label"));
  }
  SECTION("name too long for the pod hostnames, or not starting with a letter") {
    for (const std::string& name : {std::string(49, 'a'), std::string("7b-llm"), std::string("llm-")}) {
      YAML::Node doc = Demo();
      doc["metadata"]["name"] = name;
      INFO(name);
      CHECK_THAT(Errors(doc), Catch::Contains("metadata.name must be a DNS-1035 label of at most 48 characters"));
    }
    YAML::Node doc = Demo();
    doc["metadata"]["name"] = std::string(48, 'a');
    CHECK(Errors(doc) == "");
  }
  SECTION("fail-slow tiers out of order") {
    YAML::Node doc = Demo();
    doc["spec"]["failSlow"]["mitigateThreshold"] = 0.3;
    CHECK_THAT(Errors(doc), Catch::Contains("spec.failSlow.replaceThreshold: failSlow.replaceThreshold must be >"));
  }
}

TEST_CASE("the pod template keeps arbitrary PodTemplateSpec fields", "[unit]") {
  YAML::Node doc = Demo();
  doc["spec"]["template"] = YAML::Load(R"(
metadata: {labels: {team: llm}}
spec:
  nodeSelector: {gpu: h100}
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  containers: [{name: trainer, resources: {limits: {nvidia.com/gpu: 8}}}]
)");
  CHECK(Errors(doc) == "");
}

TEST_CASE("a status as the controller writes it validates and a malformed one does not", "[unit]") {
  YAML::Node doc = Demo();
  doc["status"] = YAML::Load(R"(
phase: Recovering
observedGeneration: 3
conditions:
  - {type: Valid, status: "True", observedGeneration: 3, lastTransitionTime: "2025-01-02T03:04:05Z", reason: Accepted, message: ""}
  - {type: Degraded, status: "True", observedGeneration: 3, lastTransitionTime: "2025-01-02T03:10:00.5+01:00", reason: MachineFault, message: "Xid 79 on node-7"}
codeVersion: {image: "img:1", command: [train, --lr, "0.1"], revision: v2}
versionHistory:
  - {codeVersion: {image: "img:1", command: [train], revision: v1}, appliedAt: "2025-01-01T00:00:00Z", reason: Created, outcome: Healthy}
  - {codeVersion: {image: "img:1", command: [train, --lr, "0.1"], revision: v2}, appliedAt: "2025-01-02T00:00:00Z", reason: HotUpdate, outcome: Running}
standby: {desired: 1, ready: 0, pods: [{pod: demo-p3, machineId: "", observed: false}]}
ettr: 0.97
lastCompletedStep: 1200
machines:
  - {index: 0, machineId: node-1, pod: demo-p0, observed: true}
  - {index: 1, machineId: node-7, pod: demo-p1, observed: true}
incidents:
  - id: 1
    kind: MachineFault
    signal: "Xid 79"
    detectedAt: "2025-01-02T03:10:00Z"
    decidedAt: ""
    resumedAt: ""
    machines: [node-7]
    decision: "evict node-7, activate a standby, restart the others in place"
    actions: [Evict, ActivateStandby, RestartInPlace]
    trainingTimeLostSeconds: 42.5
evictedMachines:
  - {machineId: node-7, reason: "Xid 79", at: "2025-01-02T03:10:01Z"}
)");
  CHECK(Errors(doc) == "");

  SECTION("bad phase, condition status, duplicate condition, timestamp and ETTR") {
    doc["status"]["phase"] = "Crashed";
    doc["status"]["conditions"][0]["status"] = "Maybe";
    doc["status"]["conditions"][1]["type"] = "Valid";
    doc["status"]["versionHistory"][0]["appliedAt"] = "yesterday";
    doc["status"]["ettr"] = 1.5;
    const std::string errors = Errors(doc);
    CHECK_THAT(errors, Catch::Contains("status.phase: unsupported value"));
    CHECK_THAT(errors, Catch::Contains("status.conditions[0].status: unsupported value"));
    CHECK_THAT(errors, Catch::Contains("status.conditions[1]: duplicate entry"));
    CHECK_THAT(errors, Catch::Contains("status.versionHistory[0].appliedAt: \"yesterday\" does not match the pattern"));
    CHECK_THAT(errors, Catch::Contains("status.ettr: must be <= 1"));
  }
  SECTION("incident history is bounded to 50") {
    YAML::Node incidents = doc["status"]["incidents"];
    for (int i = 0; i < 50; ++i) incidents.push_back(YAML::Clone(doc["status"]["incidents"][0]));
    CHECK_THAT(Errors(doc), Catch::Contains("status.incidents: must have at most 50 items, has 51"));
  }
}

TEST_CASE("the validator rejects a CEL rule it has no twin for", "[unit]") {
  YAML::Node schema = YAML::Load(R"(
type: object
x-kubernetes-validations: [{rule: "self.a > 1", message: m}]
properties: {a: {type: integer, description: a}}
)");
  YAML::Node doc = YAML::Load("{a: 3}");
  CHECK_THAT(Joined(ValidateAgainstSchema(schema, doc)), Catch::Contains("without a re-implementation"));
  CHECK_THAT(Joined(CheckStructuralSchema(schema)), Catch::Contains("without a re-implementation"));
  CHECK(KnownCelRules().size() == 6);
}

}  // namespace
}  // namespace peregrine
