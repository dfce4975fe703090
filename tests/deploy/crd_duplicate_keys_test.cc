// The CRD has no duplicate mapping key. yaml-cpp keeps both entries of a duplicated key
// and answers a lookup with the first (checked below), so a second, different definition of
// a field would pass every schema test unseen; the API server rejects such a manifest.
// DuplicateKeys walks the parser's events (yaml-cpp's EventHandler), one key set per
// mapping being read.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "tests/deploy/deploy_tools.h"

namespace peregrine {
namespace {

class DuplicateKeyFinder : public YAML::EventHandler {
 public:
  std::vector<std::string> duplicates;  // "line N: key 'k' repeated in the mapping at line M"

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Value(mark, ""); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Value(mark, ""); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string& value) override {
    Value(mark, value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Value(mark, "");
    frames_.push_back(Frame{false, mark.line + 1, true, {}});
  }
  void OnSequenceEnd() override { frames_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Value(mark, "");
    frames_.push_back(Frame{true, mark.line + 1, true, {}});
  }
  void OnMapEnd() override { frames_.pop_back(); }

 private:
  struct Frame {
    bool map = false;
    int line = 0;
    bool expect_key = true;
    std::set<std::string> keys;
  };

  // A node inside the current collection: in a mapping, keys and values alternate.
  void Value(const YAML::Mark& mark, const std::string& scalar) {
    if (frames_.empty() || !frames_.back().map) return;
    Frame& f = frames_.back();
    if (f.expect_key && !f.keys.insert(scalar).second) {
      std::ostringstream s;
      s << "line " << mark.line + 1 << ": key '" << scalar << "' repeated in the mapping at line " << f.line;
      duplicates.push_back(s.str());
    }
    f.expect_key = !f.expect_key;
  }

  std::vector<Frame> frames_;
};

std::vector<std::string> DuplicateKeys(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DuplicateKeyFinder finder;
  while (parser.HandleNextDocument(finder)) {
  }
  return finder.duplicates;
}

TEST_CASE("yaml-cpp keeps a duplicated key silently: DuplicateKeys finds it with its line", "[unit]") {
  const std::string doc = "a: 1\nb:\n  c: 2\n  d: [1, 2]\n  c: 3\na: 4\ne:\n  - c: 1\n  - c: 2\n";
  YAML::Node n = YAML::Load(doc);
  CHECK(n["a"].as<int>() == 1);  // no error, the first wins
  CHECK(n.size() == 4);
  CHECK(DuplicateKeys(doc) == std::vector<std::string>{"line 5: key 'c' repeated in the mapping at line 3",
                                                       "line 6: key 'a' repeated in the mapping at line 1"});
  CHECK(DuplicateKeys("a: {x: 1, y: 2}\nb: {x: 1}\nc: [{x: 1}, {x: 2}]\n").empty());
}

TEST_CASE("the CRD has no duplicate mapping key", "[unit]") {
  std::ifstream file(SourceDir() / "crds/peregrine.dev_trainingjobs.yaml");
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<std::string> duplicates = DuplicateKeys(text.str());
  INFO(Catch::Detail::stringify(duplicates));
  CHECK(duplicates.empty());
}

}  // namespace
}  // namespace peregrine
