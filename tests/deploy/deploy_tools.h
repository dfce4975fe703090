// Shared helpers of the deploy suite's integration tests: where the tools are, a
// scratch directory that removes itself, and running a tool with a readable failure.
// Header-only; used by helm_chart_test.cc and alert_rules_test.cc.
#ifndef PEREGRINE_TESTS_DEPLOY_DEPLOY_TOOLS_H_
#define PEREGRINE_TESTS_DEPLOY_DEPLOY_TOOLS_H_

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "tests/deploy/run_process.h"

namespace peregrine {

inline const std::filesystem::path& SourceDir() {
  static const std::filesystem::path dir = PEREGRINE_SOURCE_DIR;
  return dir;
}

// The helm binary installed by scripts/install-tools.sh; fails the test when missing.
inline std::string HelmPath() {
  const std::filesystem::path helm = SourceDir() / ".tools/bin/helm";
  if (!std::filesystem::exists(helm)) {
    FAIL(helm.string() << " is missing: run scripts/install-tools.sh (installs helm and kubectl "
                                  "into .tools/bin)");
  }
  return helm.string();
}

inline std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = ::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/peregrine-deploy.XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs argv; REQUIREs that it could start. The result carries exit code and output.
inline ProcessResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  absl::StatusOr<ProcessResult> r = RunProcess(argv, env);
  if (!r.ok()) FAIL("cannot run " << argv[0] << ": " << r.status().message());
  return *r;
}

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_DEPLOY_TOOLS_H_
