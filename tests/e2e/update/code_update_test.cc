// The code-update request body (code_update.h): parsing with errors that name the field,
// the JSON round trip peregrinectl relies on, and applying it to a job.
#include <catch2/catch.hpp>

#include <string>

#include "controller/code_update.h"

namespace peregrine {
namespace {

TEST_CASE("code update requests parse, and bad ones name the field", "[unit]") {
  auto full = ParseCodeUpdateRequest(R"({"revision":"r2","image":"img:2","command":["python","t.py"],"urgent":true})");
  REQUIRE(full.ok());
  CHECK(full->revision == "r2");
  CHECK(full->image == std::optional<std::string>("img:2"));
  CHECK(full->command == std::optional<std::vector<std::string>>({"python", "t.py"}));
  CHECK(full->urgent);
  auto minimal = ParseCodeUpdateRequest(R"({"revision":"r3"})");
  REQUIRE(minimal.ok());
  CHECK_FALSE(minimal->image.has_value());
  CHECK_FALSE(minimal->command.has_value());
  CHECK_FALSE(minimal->urgent);

  const struct {
    const char* body;
    const char* names;
  } bad[] = {
      {"[]", "not a JSON object"},
      {"{", "not a JSON object"},
      {R"({})", "revision: required"},
      {R"({"revision":""})", "revision: required"},
      {R"({"revision":7})", "revision: expected a string"},
      {R"({"revision":"r","image":1})", "image: expected a string"},
      {R"({"revision":"r","command":"python t.py"})", "command: expected a list"},
      {R"({"revision":"r","command":[]})", "command: must name a program"},
      {R"({"revision":"r","command":[""]})", "command: must name a program"},
      {R"({"revision":"r","command":["a",1]})", "command: expected a list"},
      {R"({"revision":"r","urgent":"yes"})", "urgent: expected true or false"},
      {R"({"revision":"r","revison":"x"})", "unknown field 'revison'"},
  };
  for (const auto& c : bad) {
    INFO(c.body);
    auto r = ParseCodeUpdateRequest(c.body);
    REQUIRE_FALSE(r.ok());
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.names));
  }
}

TEST_CASE("a code update round-trips through JSON and applies to the job", "[unit]") {
  CodeUpdateRequest r;
  r.revision = "v9";
  r.command = std::vector<std::string>{"sim-trainer", "--steps", "3"};
  r.urgent = true;
  auto back = ParseCodeUpdateRequest(CodeUpdateRequestToJson(r));
  REQUIRE(back.ok());
  CHECK(back->revision == "v9");
  CHECK(back->command == r.command);
  CHECK_FALSE(back->image.has_value());
  CHECK(back->urgent);

  TrainingJob job;
  job.spec.code.image = "img:1";
  job.spec.code.command = {"old"};
  job.spec.code.revision = "v1";
  job.spec.code.env = {{"A", "1"}};
  const TrainingJob urgent = ApplyCodeUpdate(job, r);
  CHECK(urgent.spec.code.revision == "v9");
  CHECK(urgent.spec.code.command == *r.command);
  CHECK(urgent.spec.code.image == "img:1");  // kept
  CHECK(urgent.spec.code.env == job.spec.code.env);
  CHECK(urgent.metadata.annotations.at(kHotUpdateAnnotation) == "urgent");
  r.urgent = false;
  const TrainingJob lazy = ApplyCodeUpdate(urgent, r);
  CHECK(lazy.metadata.annotations.count(kHotUpdateAnnotation) == 0);
}

}  // namespace
}  // namespace peregrine
