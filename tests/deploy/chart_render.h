// Rendering helm/peregrine with the real helm for the deploy suite's tests
// (helm_chart_test.cc, images_test.cc), and small accessors for the rendered objects.
// The controller's flags in the rendered Deployment go through the controller's own
// ParseKubeMainFlags. Header-only; REQUIRE/FAIL on errors.
#ifndef PEREGRINE_TESTS_DEPLOY_CHART_RENDER_H_
#define PEREGRINE_TESTS_DEPLOY_CHART_RENDER_H_

#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "controller/kube/kube_command.h"
#include "tests/deploy/deploy_tools.h"

namespace peregrine {

inline constexpr char kNamespace[] = "peregrine-system";

// helm's own directories point into a scratch dir, so the test neither reads nor
// writes the user's helm configuration.
class Helm {
 public:
  Helm() : helm_(HelmPath()) {}

  ProcessResult Lint(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {helm_, "lint", "--strict", Chart()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Run(argv, Env());
  }

  ProcessResult Template(const std::vector<std::string>& extra = {}, const std::string& release = "peregrine") {
    std::vector<std::string> argv = {helm_, "template", release, Chart(), "--namespace", kNamespace,
                                     "--include-crds"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Run(argv, Env());
  }

  // Renders and parses; REQUIREs success.
  std::vector<YAML::Node> Render(const std::vector<std::string>& extra = {},
                                 const std::string& release = "peregrine") {
    const ProcessResult r = Template(extra, release);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<YAML::Node> objects;
    for (const YAML::Node& doc : YAML::LoadAll(r.out)) {
      if (doc.IsMap()) objects.push_back(doc);
    }
    return objects;
  }

 private:
  static std::string Chart() { return (SourceDir() / "helm/peregrine").string(); }
  std::vector<std::string> Env() const {
    const std::string home = scratch_.path().string();
    return {"HELM_CACHE_HOME=" + home + "/cache", "HELM_CONFIG_HOME=" + home + "/config",
            "HELM_DATA_HOME=" + home + "/data"};
  }

  ScratchDir scratch_;
  std::string helm_;
};

inline std::vector<YAML::Node> OfKind(const std::vector<YAML::Node>& objects, const std::string& kind) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& o : objects) {
    if (o["kind"].Scalar() == kind) out.push_back(o);
  }
  return out;
}

inline YAML::Node One(const std::vector<YAML::Node>& objects, const std::string& kind) {
  const std::vector<YAML::Node> found = OfKind(objects, kind);
  INFO("kind " << kind);
  REQUIRE(found.size() == 1);
  return found[0];
}

inline YAML::Node ServiceNamed(const std::vector<YAML::Node>& objects, const std::string& suffix) {
  for (const YAML::Node& s : OfKind(objects, "Service")) {
    const std::string name = s["metadata"]["name"].Scalar();
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return s;
    }
  }
  FAIL("no Service named *" << suffix);
  return {};
}

inline std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  for (const YAML::Node& n : seq) out.push_back(n.Scalar());
  return out;
}

// Every label of `selector` is on `labels`.
inline bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  for (const auto& kv : selector) {
    if (!labels[kv.first.Scalar()] || labels[kv.first.Scalar()].Scalar() != kv.second.Scalar()) return false;
  }
  return true;
}

// The controller container's args parsed by the controller's own flag parser, with the
// downward-API environment the Deployment gives it.
inline KubeMainOptions ParseControllerArgs(const YAML::Node& container) {
  std::map<std::string, std::string> env = {{"POD_NAME", "ctl-0"}, {"POD_NAMESPACE", kNamespace}};
  auto parsed = ParseKubeMainFlags(Strings(container["args"]), [&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return *parsed;
}

inline std::string AppVersion() {
  return YAML::LoadFile((SourceDir() / "helm/peregrine/Chart.yaml").string())["appVersion"].Scalar();
}

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_CHART_RENDER_H_
