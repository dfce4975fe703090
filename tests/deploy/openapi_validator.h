// A small OpenAPI v3 structural-schema validator for the deploy suite: it checks a
// manifest (YAML) against a CRD's openAPIV3Schema the way the Kubernetes API server
// would, minus the server: defaults are applied first (objects and their children,
// top down), then types, required, enum, minimum/maximum (with exclusive bounds),
// minLength/maxLength, pattern, format date-time, minItems/maxItems, list-type map/set
// uniqueness, additionalProperties, x-kubernetes-preserve-unknown-fields and the CEL
// rules in x-kubernetes-validations.
//
// Differences from the server, all deliberate:
//  - unknown fields are errors (the server prunes them silently; the suite wants
//    examples with typos to fail);
//  - CEL is not interpreted: each rule the CRD uses has a C++ re-implementation in
//    openapi_validator.cc keyed by the rule's exact text; a rule without one is an
//    error, so changing a rule in the CRD forces updating its twin here;
//  - metadata at the root is not checked beyond being an object (the server validates
//    ObjectMeta itself), except through the CRD's own CEL rules.
//
// YAML scalars are typed by the YAML 1.2 core schema: quoted scalars are strings,
// plain ones are null/bool/int/float when they look like one.
//
// Errors read "<field.path>: <what is wrong>", e.g. "spec.parallelism.tensor: must be
// of type integer, got string \"two\"". Thread-compatible.
#ifndef PEREGRINE_TESTS_DEPLOY_OPENAPI_VALIDATOR_H_
#define PEREGRINE_TESTS_DEPLOY_OPENAPI_VALIDATOR_H_

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace peregrine {

// Applies the schema's defaults to `object` in place and returns every violation
// (empty when valid).
std::vector<std::string> ValidateAgainstSchema(const YAML::Node& schema, YAML::Node& object);

// Checks that `schema` is structural (every node has a type unless it preserves
// unknown fields or is int-or-string; no properties together with
// additionalProperties), that every property has a non-empty description, and that
// every default validates against its own schema. Returns the violations.
std::vector<std::string> CheckStructuralSchema(const YAML::Node& schema);

// The CEL rules that have a re-implementation (exact rule texts).
std::vector<std::string> KnownCelRules();

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_OPENAPI_VALIDATOR_H_
