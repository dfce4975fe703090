#include "tests/deploy/openapi_validator.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine {
namespace {

enum class JsonType { kNull, kBoolean, kInteger, kNumber, kString, kArray, kObject };

const char* JsonTypeName(JsonType t) {
  switch (t) {
    case JsonType::kNull: return "null";
    case JsonType::kBoolean: return "boolean";
    case JsonType::kInteger: return "integer";
    case JsonType::kNumber: return "number";
    case JsonType::kString: return "string";
    case JsonType::kArray: return "array";
    case JsonType::kObject: return "object";
  }
  return "?";
}

bool Matches(const std::string& s, const char* re) { return std::regex_match(s, std::regex(re)); }

// YAML 1.2 core schema resolution of a scalar; quoted or !!str-tagged scalars are strings.
JsonType TypeOf(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return JsonType::kNull;
  if (n.IsSequence()) return JsonType::kArray;
  if (n.IsMap()) return JsonType::kObject;
  const std::string& tag = n.Tag();
  if (tag == "!" || tag == "tag:yaml.org,2002:str" || tag == "!!str") return JsonType::kString;
  const std::string& s = n.Scalar();
  if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return JsonType::kNull;
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    return JsonType::kBoolean;
  }
  if (Matches(s, "[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")) return JsonType::kInteger;
  if (Matches(s, R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))")) {
    return JsonType::kNumber;
  }
  return JsonType::kString;
}

double NumberOf(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (s.rfind("0o", 0) == 0) return static_cast<double>(std::strtoll(s.c_str() + 2, nullptr, 8));
  if (s.rfind("0x", 0) == 0) return static_cast<double>(std::strtoll(s.c_str() + 2, nullptr, 16));
  if (s.find("inf") != std::string::npos || s.find("Inf") != std::string::npos ||
      s.find("INF") != std::string::npos) {
    return s[0] == '-' ? -INFINITY : INFINITY;
  }
  if (s.find("nan") != std::string::npos || s.find("NaN") != std::string::npos ||
      s.find("NAN") != std::string::npos) {
    return NAN;
  }
  return std::strtod(s.c_str(), nullptr);
}

std::optional<int64_t> IntegerOf(const YAML::Node& n) {
  if (TypeOf(n) != JsonType::kInteger) return std::nullopt;
  const std::string& s = n.Scalar();
  errno = 0;
  int64_t v = 0;
  if (s.rfind("0o", 0) == 0) v = std::strtoll(s.c_str() + 2, nullptr, 8);
  else if (s.rfind("0x", 0) == 0) v = std::strtoll(s.c_str() + 2, nullptr, 16);
  else v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

std::string Describe(const YAML::Node& n) {
  if (n.IsScalar()) return absl::StrCat(JsonTypeName(TypeOf(n)), " \"", n.Scalar(), "\"");
  return JsonTypeName(TypeOf(n));
}

// --- CEL re-implementations ---------------------------------------------------------
// Each entry re-implements one rule of crds/peregrine.dev_trainingjobs.yaml, keyed by
// the rule's exact text. nullopt means the rule could not be evaluated (a field it
// reads is missing or mistyped), which the API server also reports as an error.
using CelRule = std::function<std::optional<bool>(const YAML::Node& self)>;

// Never reassign a YAML::Node variable here: yaml-cpp's assignment rebinds the node it
// refers to, which would rewrite the document; walk by recursion instead.
std::optional<int64_t> IntAt(const YAML::Node& n, const std::vector<const char*>& path, size_t i) {
  if (i == path.size()) return IntegerOf(n);
  if (!n.IsMap() || !n[path[i]]) return std::nullopt;
  return IntAt(n[path[i]], path, i + 1);
}

std::optional<int64_t> IntField(const YAML::Node& self, std::vector<const char*> path) {
  return IntAt(self, path, 0);
}

std::optional<double> NumberField(const YAML::Node& self, const char* key) {
  if (!self.IsMap() || !self[key]) return std::nullopt;
  const JsonType t = TypeOf(self[key]);
  if (t != JsonType::kInteger && t != JsonType::kNumber) return std::nullopt;
  return NumberOf(self[key]);
}

const std::map<std::string, CelRule>& CelRules() {
  static const auto* rules = new std::map<std::string, CelRule>{
      // Root: metadata.name is a DNS-1035 label of at most 48 characters (it names the
      // Service; pod hostnames <job>-m<slot>-<serial> must stay within 63).
      {"size(self.metadata.name) <= 48 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
       [](const YAML::Node& self) -> std::optional<bool> {
         if (!self["metadata"] || !self["metadata"]["name"]) return std::nullopt;
         const std::string name = self["metadata"]["name"].Scalar();
         if (name.empty() || name.size() > 48 || name.front() < 'a' || name.front() > 'z') return false;
         if (name.back() == '-') return false;
         for (char c : name) {
           if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
         }
         return true;
       }},
      // spec: the TP x PP x DP product covers every GPU exactly.
      {"self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data == "
       "self.machines * self.gpusPerMachine",
       [](const YAML::Node& self) -> std::optional<bool> {
         auto t = IntField(self, {"parallelism", "tensor"});
         auto p = IntField(self, {"parallelism", "pipeline"});
         auto d = IntField(self, {"parallelism", "data"});
         auto m = IntField(self, {"machines"});
         auto g = IntField(self, {"gpusPerMachine"});
         if (!t || !p || !d || !m || !g) return std::nullopt;
         __int128 lhs = static_cast<__int128>(*t) * *p * *d;  // CEL int64 overflow is an error
         if (lhs > INT64_MAX) return std::nullopt;
         return lhs == static_cast<__int128>(*m) * *g;
       }},
      // spec: no more standbys than machines.
      {"self.standby.min <= self.machines",
       [](const YAML::Node& self) -> std::optional<bool> {
         auto min = IntField(self, {"standby", "min"});
         auto m = IntField(self, {"machines"});
         if (!min || !m) return std::nullopt;
         return *min <= *m;
       }},
      // spec.codeVersion: the program name is not empty.
      {"self.command[0] != ''",
       [](const YAML::Node& self) -> std::optional<bool> {
         if (!self["command"] || !self["command"].IsSequence() || self["command"].size() == 0) {
           return std::nullopt;
         }
         return !self["command"][0].Scalar().empty();
       }},
      // spec.standby: min <= max.
      {"self.min <= self.max",
       [](const YAML::Node& self) -> std::optional<bool> {
         auto min = IntField(self, {"min"});
         auto max = IntField(self, {"max"});
         if (!min || !max) return std::nullopt;
         return *min <= *max;
       }},
      // spec.failSlow: the GUARD tiers are ordered.
      {"self.mitigateThreshold < self.replaceThreshold",
       [](const YAML::Node& self) -> std::optional<bool> {
         auto lo = NumberField(self, "mitigateThreshold");
         auto hi = NumberField(self, "replaceThreshold");
         if (!lo || !hi) return std::nullopt;
         return *lo < *hi;
       }},
  };
  return *rules;
}

// --- validation ------------------------------------------------------------------------

class Validator {
 public:
  explicit Validator(std::vector<std::string>& errors) : errors_(errors) {}

  void Validate(const YAML::Node& schema, YAML::Node node, const std::string& path) {
    const JsonType actual = TypeOf(node);
    if (actual == JsonType::kNull) {
      if (!schema["nullable"] || !schema["nullable"].as<bool>()) Error(path, "must not be null");
      return;
    }
    const std::string type = schema["type"] ? schema["type"].Scalar() : "";
    if (!type.empty() && !TypeMatches(type, actual)) {
      Error(path, absl::StrCat("must be of type ", type, ", got ", Describe(node)));
      return;
    }
    if (schema["enum"]) CheckEnum(schema["enum"], node, path);
    switch (actual) {
      case JsonType::kInteger:
      case JsonType::kNumber:
        CheckBounds(schema, NumberOf(node), path);
        break;
      case JsonType::kString:
        CheckString(schema, node.Scalar(), path);
        break;
      case JsonType::kArray:
        CheckArray(schema, node, path);
        break;
      case JsonType::kObject:
        CheckObject(schema, node, path);
        break;
      case JsonType::kBoolean:
      case JsonType::kNull:
        break;
    }
    if (schema["x-kubernetes-validations"]) RunCel(schema["x-kubernetes-validations"], node, path);
  }

 private:
  static bool TypeMatches(const std::string& type, JsonType actual) {
    if (type == "number") return actual == JsonType::kNumber || actual == JsonType::kInteger;
    return type == JsonTypeName(actual);
  }

  void Error(const std::string& path, const std::string& what) {
    errors_.push_back(absl::StrCat(path.empty() ? "<root>" : path, ": ", what));
  }

  void CheckEnum(const YAML::Node& values, const YAML::Node& node, const std::string& path) {
    std::vector<std::string> allowed;
    for (const YAML::Node& v : values) {
      if (node.IsScalar() && v.IsScalar() && v.Scalar() == node.Scalar() && TypeOf(v) == TypeOf(node)) return;
      allowed.push_back(v.Scalar());
    }
    Error(path, absl::StrCat("unsupported value ", Describe(node), ": must be one of ",
                             absl::StrJoin(allowed, ", ")));
  }

  void CheckBounds(const YAML::Node& schema, double v, const std::string& path) {
    if (schema["minimum"]) {
      const double min = NumberOf(schema["minimum"]);
      const bool exclusive = schema["exclusiveMinimum"] && schema["exclusiveMinimum"].as<bool>();
      if (exclusive ? !(v > min) : !(v >= min)) {
        Error(path, absl::StrCat("must be ", exclusive ? "> " : ">= ", schema["minimum"].Scalar(), ", got ", v));
      }
    }
    if (schema["maximum"]) {
      const double max = NumberOf(schema["maximum"]);
      const bool exclusive = schema["exclusiveMaximum"] && schema["exclusiveMaximum"].as<bool>();
      if (exclusive ? !(v < max) : !(v <= max)) {
        Error(path, absl::StrCat("must be ", exclusive ? "< " : "<= ", schema["maximum"].Scalar(), ", got ", v));
      }
    }
  }

  void CheckString(const YAML::Node& schema, const std::string& s, const std::string& path) {
    if (schema["minLength"] && s.size() < schema["minLength"].as<size_t>()) {
      Error(path, absl::StrCat("must be at least ", schema["minLength"].Scalar(), " characters"));
    }
    if (schema["maxLength"] && s.size() > schema["maxLength"].as<size_t>()) {
      Error(path, absl::StrCat("must be at most ", schema["maxLength"].Scalar(), " characters"));
    }
    if (schema["pattern"] && !std::regex_search(s, std::regex(schema["pattern"].Scalar()))) {
      Error(path, absl::StrCat("\"", s, "\" does not match the pattern ", schema["pattern"].Scalar()));
    }
    if (schema["format"] && schema["format"].Scalar() == "date-time" &&
        !Matches(s, R"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2}))")) {
      Error(path, absl::StrCat("\"", s, "\" is not an RFC 3339 date-time"));
    }
  }

  void CheckArray(const YAML::Node& schema, const YAML::Node& node, const std::string& path) {
    if (schema["minItems"] && node.size() < schema["minItems"].as<size_t>()) {
      Error(path, absl::StrCat("must have at least ", schema["minItems"].Scalar(), " items, has ", node.size()));
    }
    if (schema["maxItems"] && node.size() > schema["maxItems"].as<size_t>()) {
      Error(path, absl::StrCat("must have at most ", schema["maxItems"].Scalar(), " items, has ", node.size()));
    }
    for (size_t i = 0; i < node.size(); ++i) {
      YAML::Node item = node[i];
      if (schema["items"]) Validate(schema["items"], item, absl::StrCat(path, "[", i, "]"));
    }
    const std::string list_type = schema["x-kubernetes-list-type"] ? schema["x-kubernetes-list-type"].Scalar() : "";
    if (list_type == "map" && schema["x-kubernetes-list-map-keys"]) {
      std::set<std::string> seen;
      for (size_t i = 0; i < node.size(); ++i) {
        std::string key;
        for (const YAML::Node& k : schema["x-kubernetes-list-map-keys"]) {
          key += (node[i][k.Scalar()] ? node[i][k.Scalar()].Scalar() : "") + "\x1f";
        }
        if (!seen.insert(key).second) Error(absl::StrCat(path, "[", i, "]"), "duplicate entry for the list's map keys");
      }
    } else if (list_type == "set") {
      std::set<std::string> seen;
      for (size_t i = 0; i < node.size(); ++i) {
        if (!seen.insert(YAML::Dump(node[i])).second) Error(absl::StrCat(path, "[", i, "]"), "duplicate entry in a set");
      }
    }
  }

  void CheckObject(const YAML::Node& schema, YAML::Node node, const std::string& path) {
    const YAML::Node props = schema["properties"];
    // Defaults first, as the API server does before validating.
    if (props) {
      for (const auto& kv : props) {
        const std::string key = kv.first.Scalar();
        if (!node[key] && kv.second["default"]) node[key] = YAML::Clone(kv.second["default"]);
      }
    }
    if (schema["required"]) {
      for (const YAML::Node& r : schema["required"]) {
        if (!node[r.Scalar()]) Error(Join(path, r.Scalar()), "Required value");
      }
    }
    if (schema["maxProperties"] && node.size() > schema["maxProperties"].as<size_t>()) {
      Error(path, absl::StrCat("must have at most ", schema["maxProperties"].Scalar(), " properties"));
    }
    const bool preserve = schema["x-kubernetes-preserve-unknown-fields"] &&
                          schema["x-kubernetes-preserve-unknown-fields"].as<bool>();
    // The API server validates ObjectMeta itself; the schema only says "object".
    const bool root_metadata = path == "metadata";
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      YAML::Node value = node[key];
      if (props && props[key]) {
        Validate(props[key], value, Join(path, key));
      } else if (schema["additionalProperties"] && schema["additionalProperties"].IsMap()) {
        Validate(schema["additionalProperties"], value, Join(path, key));
      } else if (!preserve && !root_metadata) {
        Error(Join(path, key), "unknown field (not in the schema)");
      }
    }
  }

  void RunCel(const YAML::Node& rules, const YAML::Node& self, const std::string& path) {
    for (const YAML::Node& r : rules) {
      const std::string rule = r["rule"].Scalar();
      auto it = CelRules().find(rule);
      if (it == CelRules().end()) {
        Error(path, absl::StrCat("CEL rule without a re-implementation in the test: ", rule));
        continue;
      }
      const std::string where = r["fieldPath"] ? path + r["fieldPath"].Scalar() : path;
      const std::optional<bool> ok = it->second(self);
      if (!ok.has_value()) {
        Error(where, absl::StrCat("rule could not be evaluated (missing or mistyped field): ", rule));
      } else if (!*ok) {
        Error(where, r["message"] ? r["message"].Scalar() : absl::StrCat("failed rule: ", rule));
      }
    }
  }

  std::vector<std::string>& errors_;
};

void CheckSchemaNode(const YAML::Node& schema, const std::string& path, bool is_property,
                     std::vector<std::string>& errors) {
  const bool preserve = schema["x-kubernetes-preserve-unknown-fields"] &&
                        schema["x-kubernetes-preserve-unknown-fields"].as<bool>();
  const bool int_or_string = schema["x-kubernetes-int-or-string"] && schema["x-kubernetes-int-or-string"].as<bool>();
  if (!schema["type"] && !preserve && !int_or_string) errors.push_back(absl::StrCat(path, ": schema has no type"));
  if (is_property && path != "metadata" &&
      (!schema["description"] || schema["description"].Scalar().empty())) {
    errors.push_back(absl::StrCat(path, ": schema has no description"));
  }
  if (schema["properties"] && schema["additionalProperties"]) {
    errors.push_back(absl::StrCat(path, ": properties and additionalProperties are mutually exclusive"));
  }
  if (schema["default"]) {
    YAML::Node value = YAML::Clone(schema["default"]);
    std::vector<std::string> default_errors;
    Validator(default_errors).Validate(schema, value, path);
    for (const std::string& e : default_errors) errors.push_back(absl::StrCat("default of ", e));
  }
  if (schema["x-kubernetes-validations"]) {
    for (const YAML::Node& r : schema["x-kubernetes-validations"]) {
      if (!r["rule"] || !CelRules().count(r["rule"].Scalar())) {
        errors.push_back(absl::StrCat(path, ": CEL rule without a re-implementation in the test: ",
                                      r["rule"] ? r["rule"].Scalar() : "<none>"));
      }
      if (!r["message"]) errors.push_back(absl::StrCat(path, ": CEL rule without a message"));
    }
  }
  if (schema["properties"]) {
    for (const auto& kv : schema["properties"]) {
      CheckSchemaNode(kv.second, Join(path, kv.first.Scalar()), true, errors);
    }
  }
  if (schema["items"]) CheckSchemaNode(schema["items"], path + "[]", false, errors);
  if (schema["additionalProperties"] && schema["additionalProperties"].IsMap()) {
    CheckSchemaNode(schema["additionalProperties"], path + "{}", false, errors);
  }
}

}  // namespace

std::vector<std::string> ValidateAgainstSchema(const YAML::Node& schema, YAML::Node& object) {
  std::vector<std::string> errors;
  Validator(errors).Validate(schema, object, "");
  return errors;
}

std::vector<std::string> CheckStructuralSchema(const YAML::Node& schema) {
  std::vector<std::string> errors;
  CheckSchemaNode(schema, "", false, errors);
  return errors;
}

std::vector<std::string> KnownCelRules() {
  std::vector<std::string> rules;
  for (const auto& kv : CelRules()) rules.push_back(kv.first);
  return rules;
}

}  // namespace peregrine
