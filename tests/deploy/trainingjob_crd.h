// The TrainingJob CRD (crds/peregrine.dev_trainingjobs.yaml) as the deploy tests read it:
// the whole document, the openAPIV3Schema of its version v1alpha1, and that schema's
// status part. A CRD without v1alpha1 fails the test (Catch2 FAIL); yaml-cpp throws when
// the file cannot be read. Header-only.
#ifndef PEREGRINE_TESTS_DEPLOY_TRAININGJOB_CRD_H_
#define PEREGRINE_TESTS_DEPLOY_TRAININGJOB_CRD_H_

#include <catch2/catch.hpp>

#include <yaml-cpp/yaml.h>

#include "tests/deploy/deploy_tools.h"

namespace peregrine {

inline YAML::Node LoadTrainingJobCrd() {
  return YAML::LoadFile((SourceDir() / "crds/peregrine.dev_trainingjobs.yaml").string());
}

// The openAPIV3Schema of `crd`'s version v1alpha1.
inline YAML::Node TrainingJobSchema(const YAML::Node& crd = LoadTrainingJobCrd()) {
  for (const YAML::Node& v : crd["spec"]["versions"]) {
    if (v["name"].Scalar() == "v1alpha1") return v["schema"]["openAPIV3Schema"];
  }
  FAIL("no v1alpha1 version in the CRD");
  return {};
}

inline YAML::Node TrainingJobStatusSchema() { return TrainingJobSchema()["properties"]["status"]; }

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_TRAININGJOB_CRD_H_
