#include "controller/job_parser.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/exit_rules_parser.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {
namespace {

absl::Status FieldError(const std::string& path, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return absl::StrCat("'", node.Scalar(), "'");
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "an object";
  return "null";
}

// Rejects keys of `node` that are not in `known`.
absl::Status CheckKnownFields(const YAML::Node& node, const std::string& path,
                              const std::set<std::string>& known) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return FieldError(path.empty() ? key : absl::StrCat(path, ".", key),
                        absl::StrCat("unknown field (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status RequireMap(const YAML::Node& node, const std::string& path) {
  if (!node.IsMap()) return FieldError(path, absl::StrCat("expected an object, got ", Describe(node)));
  return absl::OkStatus();
}

absl::Status ReadInt(const YAML::Node& parent, const std::string& key, const std::string& path, int* out,
                     bool required = false) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node) return required ? FieldError(field, "required") : absl::OkStatus();
  if (!node.IsScalar()) return FieldError(field, absl::StrCat("expected an integer, got ", Describe(node)));
  const std::string& s = node.Scalar();
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(s, &used, 10);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size()) return FieldError(field, absl::StrCat("expected an integer, got '", s, "'"));
  if (v < INT32_MIN || v > INT32_MAX) return FieldError(field, absl::StrCat("out of range: ", s));
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ReadDouble(const YAML::Node& parent, const std::string& key, const std::string& path, double* out) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node) return absl::OkStatus();
  if (!node.IsScalar()) return FieldError(field, absl::StrCat("expected a number, got ", Describe(node)));
  const std::string& s = node.Scalar();
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v)) {
    return FieldError(field, absl::StrCat("expected a number, got '", s, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadBool(const YAML::Node& parent, const std::string& key, const std::string& path, bool* out) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node) return absl::OkStatus();
  // A quoted "true" is a string (JSON's "true", YAML's 'true'), not a boolean.
  if (node.IsScalar() && node.Tag() != "!" && (node.Scalar() == "true" || node.Scalar() == "false")) {
    *out = node.Scalar() == "true";
    return absl::OkStatus();
  }
  return FieldError(field, absl::StrCat("expected true or false, got ", Describe(node)));
}

absl::Status ReadString(const YAML::Node& parent, const std::string& key, const std::string& path,
                        std::string* out, bool required = false) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node) return required ? FieldError(field, "required") : absl::OkStatus();
  if (!node.IsScalar()) return FieldError(field, absl::StrCat("expected a string, got ", Describe(node)));
  *out = node.Scalar();
  return absl::OkStatus();
}

// A byte count written as a Kubernetes quantity (ParseByteQuantity).
absl::Status ReadQuantity(const YAML::Node& parent, const std::string& key, const std::string& path, uint64_t* out) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node) return absl::OkStatus();
  if (!node.IsScalar()) return FieldError(field, absl::StrCat("expected a quantity such as \"8Gi\", got ", Describe(node)));
  absl::StatusOr<uint64_t> v = ParseByteQuantity(node.Scalar());
  if (!v.ok()) return FieldError(field, std::string(v.status().message()));
  *out = *v;
  return absl::OkStatus();
}

absl::Status ReadStringMap(const YAML::Node& parent, const std::string& key, const std::string& path,
                           std::map<std::string, std::string>* out) {
  const YAML::Node node = parent[key];
  const std::string field = absl::StrCat(path, ".", key);
  if (!node || node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return FieldError(field, absl::StrCat("expected an object of strings, got ", Describe(node)));
  for (const auto& kv : node) {
    if (!kv.second.IsScalar()) {
      return FieldError(absl::StrCat(field, ".", kv.first.as<std::string>()), "expected a string");
    }
    (*out)[kv.first.as<std::string>()] = kv.second.Scalar();
  }
  return absl::OkStatus();
}

nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return obj;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(YamlToJson(item));
      return arr;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted in the source: keep as a string
      if (s == "true" || s == "false") return s == "true";
      try {
        size_t used = 0;
        long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (...) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

absl::Status ParseCode(const YAML::Node& spec, CodeVersionSpec* code) {
  const std::string path = "spec.codeVersion";
  const YAML::Node node = spec["codeVersion"];
  if (!node) return FieldError(path, "required");
  if (auto s = RequireMap(node, path); !s.ok()) return s;
  if (auto s = CheckKnownFields(node, path, {"image", "command", "revision", "env"}); !s.ok()) return s;
  if (auto s = ReadString(node, "image", path, &code->image); !s.ok()) return s;
  if (auto s = ReadString(node, "revision", path, &code->revision); !s.ok()) return s;
  if (auto s = ReadStringMap(node, "env", path, &code->env); !s.ok()) return s;
  const YAML::Node cmd = node["command"];
  if (!cmd) return FieldError(path + ".command", "required");
  if (!cmd.IsSequence()) return FieldError(path + ".command", absl::StrCat("expected a list of strings, got ", Describe(cmd)));
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (!cmd[i].IsScalar()) return FieldError(absl::StrFormat("%s.command[%d]", path, i), "expected a string");
    code->command.push_back(cmd[i].Scalar());
  }
  return absl::OkStatus();
}

absl::Status ParseSpec(const YAML::Node& spec, TrainingJobSpec* out) {
  const std::string p = "spec";
  if (auto s = RequireMap(spec, p); !s.ok()) return s;
  if (auto s = CheckKnownFields(spec, p, {"machines", "gpusPerMachine", "parallelism", "launch", "codeVersion",
                                          "template", "standby", "faultTolerance", "failSlow", "checkpoint", "suspend"});
      !s.ok()) {
    return s;
  }
  if (auto s = ReadInt(spec, "machines", p, &out->machines, true); !s.ok()) return s;
  if (auto s = ReadBool(spec, "suspend", p, &out->suspend); !s.ok()) return s;
  if (auto s = ReadInt(spec, "gpusPerMachine", p, &out->gpus_per_machine, true); !s.ok()) return s;

  const YAML::Node par = spec["parallelism"];
  if (!par) return FieldError("spec.parallelism", "required");
  if (auto s = RequireMap(par, "spec.parallelism"); !s.ok()) return s;
  if (auto s = CheckKnownFields(par, "spec.parallelism", {"tensor", "pipeline", "data"}); !s.ok()) return s;
  if (auto s = ReadInt(par, "tensor", "spec.parallelism", &out->parallelism.tensor, true); !s.ok()) return s;
  if (auto s = ReadInt(par, "pipeline", "spec.parallelism", &out->parallelism.pipeline, true); !s.ok()) return s;
  if (auto s = ReadInt(par, "data", "spec.parallelism", &out->parallelism.data, true); !s.ok()) return s;

  std::string launch = "PerGPU";
  if (auto s = ReadString(spec, "launch", p, &launch); !s.ok()) return s;
  if (launch == "PerGPU") {
    out->launch = LaunchMode::kPerGpu;
  } else {
    return FieldError("spec.launch", absl::StrCat("unknown value '", launch,
                                                  "' (expected PerGPU: the agent starts one process per GPU with "
                                                  "torchrun's worker environment)"));
  }
  if (auto s = ParseCode(spec, &out->code); !s.ok()) return s;

  if (const YAML::Node tmpl = spec["template"]; tmpl && !tmpl.IsNull()) {
    if (auto s = RequireMap(tmpl, "spec.template"); !s.ok()) return s;
    try {
      out->template_json = YamlToJson(tmpl).dump();
    } catch (const nlohmann::json::exception& e) {
      // dump() refuses strings that are not UTF-8; the template goes to the API server as JSON.
      return FieldError("spec.template", absl::StrCat("not valid UTF-8 text: ", e.what()));
    }
  }

  if (const YAML::Node sb = spec["standby"]; sb) {
    const std::string sp = "spec.standby";
    if (auto s = RequireMap(sb, sp); !s.ok()) return s;
    if (auto s = CheckKnownFields(sb, sp, {"dailyFailureRate", "replenishHorizonHours", "percentile", "min", "max"});
        !s.ok()) {
      return s;
    }
    for (auto [key, dst] : {std::pair{"dailyFailureRate", &out->standby.daily_failure_rate},
                            std::pair{"replenishHorizonHours", &out->standby.replenish_horizon_hours},
                            std::pair{"percentile", &out->standby.percentile}}) {
      if (auto s = ReadDouble(sb, key, sp, dst); !s.ok()) return s;
    }
    if (auto s = ReadInt(sb, "min", sp, &out->standby.min); !s.ok()) return s;
    if (auto s = ReadInt(sb, "max", sp, &out->standby.max); !s.ok()) return s;
  }

  if (const YAML::Node ft = spec["faultTolerance"]; ft) {
    const std::string fp = "spec.faultTolerance";
    FaultToleranceSpec& f = out->fault_tolerance;
    if (auto s = RequireMap(ft, fp); !s.ok()) return s;
    if (auto s = CheckKnownFields(ft, fp, {"networkAlarmWindowSeconds", "networkAlarmsToEvict", "maxReattempts",
                                           "lossSpikeFactor", "hotUpdateWindowHours", "restartGraceSeconds",
                                           "heartbeatTimeoutSeconds", "maxRecoveries", "hangTimeoutSeconds",
                                           "nodeUnreachableGraceSeconds", "startTimeoutSeconds", "exitRules"});
        !s.ok()) {
      return s;
    }
    for (auto [key, dst] : {std::pair{"networkAlarmWindowSeconds", &f.network_alarm_window_seconds},
                            std::pair{"networkAlarmsToEvict", &f.network_alarms_to_evict},
                            std::pair{"maxReattempts", &f.max_reattempts},
                            std::pair{"restartGraceSeconds", &f.restart_grace_seconds},
                            std::pair{"heartbeatTimeoutSeconds", &f.heartbeat_timeout_seconds},
                            std::pair{"maxRecoveries", &f.max_recoveries},
                            std::pair{"hangTimeoutSeconds", &f.hang_timeout_seconds},
                            std::pair{"nodeUnreachableGraceSeconds", &f.node_unreachable_grace_seconds},
                            std::pair{"startTimeoutSeconds", &f.start_timeout_seconds}}) {
      if (auto s = ReadInt(ft, key, fp, dst); !s.ok()) return s;
    }
    if (const YAML::Node rules = ft["exitRules"]; rules) {
      if (auto s = ParseExitRules(rules, fp + ".exitRules", &f.exit_rules); !s.ok()) return s;
    }
    if (auto s = ReadDouble(ft, "lossSpikeFactor", fp, &f.loss_spike_factor); !s.ok()) return s;
    if (auto s = ReadDouble(ft, "hotUpdateWindowHours", fp, &f.hot_update_window_hours); !s.ok()) return s;
  }

  if (const YAML::Node fs = spec["failSlow"]; fs) {
    const std::string fp = "spec.failSlow";
    FailSlowSpec& f = out->fail_slow;
    if (auto s = RequireMap(fs, fp); !s.ok()) return s;
    if (auto s = CheckKnownFields(fs, fp, {"enabled", "changePointProbability", "verifyThreshold",
                                           "suspiciousGroupRatio", "mitigateThreshold", "replaceThreshold",
                                           "mitigation"});
        !s.ok()) {
      return s;
    }
    if (auto s = ReadBool(fs, "enabled", fp, &f.enabled); !s.ok()) return s;
    for (auto [key, dst] : {std::pair{"changePointProbability", &f.change_point_probability},
                            std::pair{"verifyThreshold", &f.verify_threshold},
                            std::pair{"suspiciousGroupRatio", &f.suspicious_group_ratio},
                            std::pair{"mitigateThreshold", &f.mitigate_threshold},
                            std::pair{"replaceThreshold", &f.replace_threshold}}) {
      if (auto s = ReadDouble(fs, key, fp, dst); !s.ok()) return s;
    }
    std::string mitigation = "Auto";
    if (auto s = ReadString(fs, "mitigation", fp, &mitigation); !s.ok()) return s;
    if (mitigation == "Auto") {
      f.mitigation = FailSlowMitigation::kAuto;
    } else if (mitigation == "MonitorOnly") {
      f.mitigation = FailSlowMitigation::kMonitorOnly;
    } else {
      return FieldError(fp + ".mitigation",
                        absl::StrCat("unknown value '", mitigation, "' (expected Auto or MonitorOnly)"));
    }
  }

  if (const YAML::Node cp = spec["checkpoint"]; cp) {
    const std::string cpp = "spec.checkpoint";
    CheckpointSpec& c = out->checkpoint;
    if (auto s = RequireMap(cp, cpp); !s.ok()) return s;
    if (auto s = CheckKnownFields(cp, cpp, {"intervalSteps", "backupCopies", "memoryLimit", "backupBandwidth",
                                            "persistEverySteps", "persistPath"});
        !s.ok()) {
      return s;
    }
    if (auto s = ReadInt(cp, "intervalSteps", cpp, &c.interval_steps); !s.ok()) return s;
    if (auto s = ReadInt(cp, "backupCopies", cpp, &c.backup_copies); !s.ok()) return s;
    if (auto s = ReadQuantity(cp, "memoryLimit", cpp, &c.memory_limit_bytes); !s.ok()) return s;
    if (auto s = ReadQuantity(cp, "backupBandwidth", cpp, &c.backup_bandwidth_bytes_per_second); !s.ok()) return s;
    if (auto s = ReadInt(cp, "persistEverySteps", cpp, &c.persist_every_steps); !s.ok()) return s;
    if (auto s = ReadString(cp, "persistPath", cpp, &c.persist_path); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

}  // namespace

absl::Status ValidateTrainingJob(const TrainingJob& job) {
  const TrainingJobSpec& s = job.spec;
  if (!IsDns1123Label(job.metadata.name)) {
    return FieldError("metadata.name", absl::StrCat("'", job.metadata.name,
                                                     "' is not a DNS-1123 label (lowercase letters, digits, '-')"));
  }
  if (job.metadata.name.size() > static_cast<size_t>(kMaxJobNameLength) || job.metadata.name.front() < 'a' ||
      job.metadata.name.front() > 'z') {
    return FieldError("metadata.name",
                      absl::StrFormat("'%s' must start with a letter and have at most %d characters: it names the "
                                      "job's Service and prefixes its pods' hostnames <job>-m<slot>-<serial>",
                                      job.metadata.name, kMaxJobNameLength));
  }
  if (!IsDns1123Label(job.metadata.namespace_)) {
    return FieldError("metadata.namespace", absl::StrCat("'", job.metadata.namespace_, "' is not a DNS-1123 label"));
  }
  if (auto q = job.metadata.labels.find(kKueueQueueNameLabel); q != job.metadata.labels.end() && !IsDns1123Label(q->second)) {
    return FieldError(absl::StrCat("metadata.labels[", kKueueQueueNameLabel, "]"),
                      absl::StrCat("'", q->second, "' is not a valid queue name (the LocalQueue's name: 1-63 lower-case "
                                   "letters, digits and '-', starting and ending with a letter or digit)"));
  }
  if (s.machines < 1 || s.machines > 100000) return FieldError("spec.machines", "must be between 1 and 100000");
  if (s.gpus_per_machine < 1 || s.gpus_per_machine > 64) {
    return FieldError("spec.gpusPerMachine", "must be between 1 and 64");
  }
  auto layout = ParallelLayout::Create(s.parallelism.tensor, s.parallelism.pipeline, s.parallelism.data,
                                       s.gpus_per_machine);
  if (!layout.ok()) return FieldError("spec.parallelism", std::string(layout.status().message()));
  if (static_cast<long long>(layout->world_size()) != static_cast<long long>(s.machines) * s.gpus_per_machine) {
    return FieldError("spec.parallelism",
                      absl::StrFormat("tensor*pipeline*data = %d must equal machines*gpusPerMachine = %d",
                                      layout->world_size(), s.machines * s.gpus_per_machine));
  }
  if (s.code.command.empty()) return FieldError("spec.codeVersion.command", "must not be empty");
  if (s.code.command[0].empty()) return FieldError("spec.codeVersion.command[0]", "must not be empty");
  const StandbySpec& sb = s.standby;
  if (!(sb.daily_failure_rate >= 0 && sb.daily_failure_rate <= 1)) {
    return FieldError("spec.standby.dailyFailureRate", "must be within [0, 1]");
  }
  if (!(sb.percentile > 0 && sb.percentile < 1)) return FieldError("spec.standby.percentile", "must be within (0, 1)");
  if (!(sb.replenish_horizon_hours > 0)) return FieldError("spec.standby.replenishHorizonHours", "must be > 0");
  if (sb.min < 0) return FieldError("spec.standby.min", "must be >= 0");
  if (sb.max < sb.min) return FieldError("spec.standby.max", absl::StrFormat("must be >= min (%d)", sb.min));
  if (sb.min > s.machines) {
    // More standbys than machines can never be justified by the binomial sizing.
    return FieldError("spec.standby.min", absl::StrFormat("must be <= machines (%d)", s.machines));
  }
  const FaultToleranceSpec& f = s.fault_tolerance;
  if (f.network_alarm_window_seconds < 1) return FieldError("spec.faultTolerance.networkAlarmWindowSeconds", "must be >= 1");
  if (f.network_alarms_to_evict < 1) return FieldError("spec.faultTolerance.networkAlarmsToEvict", "must be >= 1");
  if (f.max_reattempts < 0) return FieldError("spec.faultTolerance.maxReattempts", "must be >= 0");
  if (!(f.loss_spike_factor > 1)) return FieldError("spec.faultTolerance.lossSpikeFactor", "must be > 1");
  if (!(f.hot_update_window_hours > 0)) return FieldError("spec.faultTolerance.hotUpdateWindowHours", "must be > 0");
  if (f.restart_grace_seconds < 0) return FieldError("spec.faultTolerance.restartGraceSeconds", "must be >= 0");
  if (f.heartbeat_timeout_seconds < 1) return FieldError("spec.faultTolerance.heartbeatTimeoutSeconds", "must be >= 1");
  if (f.max_recoveries < 0) return FieldError("spec.faultTolerance.maxRecoveries", "must be >= 0");
  if (f.node_unreachable_grace_seconds < 0) {
    return FieldError("spec.faultTolerance.nodeUnreachableGraceSeconds", "must be >= 0");
  }
  if (f.hang_timeout_seconds < 1) return FieldError("spec.faultTolerance.hangTimeoutSeconds", "must be >= 1");
  if (f.start_timeout_seconds < 1) return FieldError("spec.faultTolerance.startTimeoutSeconds", "must be >= 1");
  const FailSlowSpec& fs = s.fail_slow;
  if (!(fs.change_point_probability > 0 && fs.change_point_probability < 1)) {
    return FieldError("spec.failSlow.changePointProbability", "must be within (0, 1)");
  }
  if (!(fs.verify_threshold > 0)) return FieldError("spec.failSlow.verifyThreshold", "must be > 0");
  if (!(fs.suspicious_group_ratio > 1)) return FieldError("spec.failSlow.suspiciousGroupRatio", "must be > 1");
  if (!(fs.mitigate_threshold > 0 && fs.replace_threshold > fs.mitigate_threshold)) {
    return FieldError("spec.failSlow.replaceThreshold", "must be > mitigateThreshold > 0");
  }
  if (s.checkpoint.interval_steps < 0) return FieldError("spec.checkpoint.intervalSteps", "must be >= 0");
  if (s.checkpoint.backup_copies < 0) return FieldError("spec.checkpoint.backupCopies", "must be >= 0");
  if (s.checkpoint.backup_copies > 8) return FieldError("spec.checkpoint.backupCopies", "must be <= 8");
  if (s.checkpoint.persist_every_steps < 0) return FieldError("spec.checkpoint.persistEverySteps", "must be >= 0");
  if (s.checkpoint.persist_every_steps > 0 && s.checkpoint.interval_steps == 0) {
    return FieldError("spec.checkpoint.persistEverySteps", "needs spec.checkpoint.intervalSteps > 0");
  }
  if (!s.checkpoint.persist_path.empty() && s.checkpoint.persist_path.front() != '/') {
    return FieldError("spec.checkpoint.persistPath",
                      absl::StrCat("must be an absolute path inside the pod, got '", s.checkpoint.persist_path, "'"));
  }
  return absl::OkStatus();
}

// A Kubernetes quantity: a decimal number (optional fraction) and an optional suffix:
// binary Ki Mi Gi Ti Pi Ei (powers of 1024), decimal k M G T P E (powers of 1000), or an
// exponent e<N> / E<N>. The value must be a whole number of bytes below 2^63.
absl::StatusOr<uint64_t> ParseByteQuantity(std::string_view text) {
  const std::string quoted = absl::StrCat("'", std::string(text), "'");
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte quantity: ", quoted, " (", why,
                                                   "; expected e.g. 8Gi, 500Mi, 1G or 1073741824)"));
  };
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  if (i < text.size() && text[i] == '-') return bad("negative");
  const size_t int_begin = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  std::string digits(text.substr(int_begin, i - int_begin));
  std::string fraction;
  if (i < text.size() && text[i] == '.') {
    const size_t frac_begin = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    fraction = std::string(text.substr(frac_begin, i - frac_begin));
  }
  if (digits.empty() && fraction.empty()) return bad("no number");
  const std::string_view suffix = text.substr(i);
  // value = (digits.fraction) * base^power * 10^exp10
  int base = 1000, power = 0, exp10 = 0;
  static const char* const kBinary[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  static const char* const kDecimal[] = {"k", "M", "G", "T", "P", "E"};
  bool known = suffix.empty();
  for (int k = 0; k < 6 && !known; ++k) {
    if (suffix == kBinary[k]) base = 1024, power = k + 1, known = true;
    else if (suffix == kDecimal[k]) base = 1000, power = k + 1, known = true;
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int e = 0;
    size_t j = 1;
    bool neg = false;
    if (suffix[j] == '+' || suffix[j] == '-') neg = suffix[j++] == '-';
    const size_t exp_begin = j;
    while (j < suffix.size() && suffix[j] >= '0' && suffix[j] <= '9' && e < 100) e = e * 10 + (suffix[j++] - '0');
    if (j == suffix.size() && j > exp_begin) {
      exp10 = neg ? -e : e;
      known = true;
    }
  }
  if (!known) return bad(absl::StrCat("unknown suffix '", std::string(suffix), "'"));
  // Exact arithmetic in 128 bits: mantissa = digits fraction as an integer, divided by
  // 10^len(fraction), times base^power and 10^exp10.
  unsigned __int128 mantissa = 0;
  const unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 63;
  std::string all = digits + fraction;
  for (char c : all) {
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (mantissa >= (kLimit << 40)) return bad("too large");
  }
  unsigned __int128 scale = 1;
  for (int k = 0; k < power; ++k) {
    scale *= static_cast<unsigned>(base);
  }
  int div10 = static_cast<int>(fraction.size()) - exp10;
  for (; div10 < 0; ++div10) {
    scale *= 10;
    if (scale >= (kLimit << 10)) return bad("too large");
  }
  unsigned __int128 value = mantissa * scale;
  if (mantissa != 0 && value / mantissa != scale) return bad("too large");
  for (; div10 > 0; --div10) {
    if (value % 10 != 0) return bad("not a whole number of bytes");
    value /= 10;
  }
  if (value >= kLimit) return bad("too large");
  return static_cast<uint64_t>(value);
}

absl::StatusOr<TrainingJob> ParseTrainingJob(std::string_view text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid YAML or JSON: ", e.what()));
  }
  try {
    if (!root.IsMap()) return absl::InvalidArgumentError("a TrainingJob must be an object");
    TrainingJob job;
    std::string api_version, kind;
    if (auto s = ReadString(root, "apiVersion", "", &api_version, true); !s.ok()) {
      return FieldError("apiVersion", "required");
    }
    if (api_version != "peregrine.dev/v1alpha1") {
      return FieldError("apiVersion", absl::StrCat("'", api_version, "' is not peregrine.dev/v1alpha1"));
    }
    if (auto s = ReadString(root, "kind", "", &kind, true); !s.ok()) return FieldError("kind", "required");
    if (kind != "TrainingJob") return FieldError("kind", absl::StrCat("'", kind, "' is not TrainingJob"));
    const YAML::Node meta = root["metadata"];
    if (!meta) return FieldError("metadata", "required");
    if (auto s = RequireMap(meta, "metadata"); !s.ok()) return s;
    if (auto s = ReadString(meta, "name", "metadata", &job.metadata.name, true); !s.ok()) return s;
    if (auto s = ReadString(meta, "namespace", "metadata", &job.metadata.namespace_); !s.ok()) return s;
    if (auto s = ReadString(meta, "uid", "metadata", &job.metadata.uid); !s.ok()) return s;
    if (auto s = ReadString(meta, "resourceVersion", "metadata", &job.metadata.resource_version); !s.ok()) return s;
    int generation = 0;
    if (auto s = ReadInt(meta, "generation", "metadata", &generation); !s.ok()) return s;
    job.metadata.generation = generation;
    if (auto s = ReadStringMap(meta, "labels", "metadata", &job.metadata.labels); !s.ok()) return s;
    if (auto s = ReadStringMap(meta, "annotations", "metadata", &job.metadata.annotations); !s.ok()) return s;
    const YAML::Node spec = root["spec"];
    if (!spec) return FieldError("spec", "required");
    if (auto s = ParseSpec(spec, &job.spec); !s.ok()) return s;
    if (auto s = ValidateTrainingJob(job); !s.ok()) return s;
    return job;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed TrainingJob: ", e.what()));
  }
}

absl::StatusOr<TrainingJob> LoadTrainingJobFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto job = ParseTrainingJob(buffer.str());
  if (!job.ok()) return absl::Status(job.status().code(), absl::StrCat(path, ": ", job.status().message()));
  return job;
}

}  // namespace peregrine
