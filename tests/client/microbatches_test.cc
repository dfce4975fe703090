// pg_microbatches (client/peregrine_client.h) on real plan files written the way the agent
// writes them (temporary file + rename), named by PEREGRINE_MICROBATCH_PLAN set in-process:
// no agent, no plan, a plan before and from its from_step, a replaced plan, and a table of
// garbage files whose errors name the file and the field.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "client/peregrine_client.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using testing::TempDir;
using testing::WriteFile;

struct Answer {
  int rc = -99;
  uint32_t first = 0;
  uint32_t count = 0;
  double scale = 0;
  std::string err;
};

Answer Ask(uint64_t step, uint32_t dp_rank, uint32_t default_count) {
  Answer a;
  char err[512];
  a.rc = pg_microbatches(step, dp_rank, default_count, &a.first, &a.count, &a.scale, err, sizeof(err));
  a.err = err;
  return a;
}

// Replaces `path` as the agent does: write a temporary file, rename it over.
void Publish(const std::string& path, const std::string& text) {
  WriteFile(path + ".tmp", text);
  REQUIRE(std::rename((path + ".tmp").c_str(), path.c_str()) == 0);
}

std::string PlanText(const std::string& counts, uint32_t global, double scale, uint64_t from_step = 10,
                     uint64_t id = 1) {
  char scale_text[64];
  std::snprintf(scale_text, sizeof(scale_text), "%.17g", scale);
  return "version=1\nplan_id=" + std::to_string(id) + "\nfrom_step=" + std::to_string(from_step) +
         "\nglobal_micro_batches=" + std::to_string(global) + "\ngradient_scale=" + scale_text +
         "\ncounts=" + counts + "\n";
}

struct PlanEnv {
  PlanEnv() { ::setenv("PEREGRINE_MICROBATCH_PLAN", path.c_str(), 1); }
  ~PlanEnv() { ::unsetenv("PEREGRINE_MICROBATCH_PLAN"); }
  TempDir dir;
  std::string path = dir.Path("microbatch-plan");
};

void CheckEven(const Answer& a, uint32_t dp_rank, uint32_t k) {
  CHECK(a.first == dp_rank * k);
  CHECK(a.count == k);
  CHECK(a.scale == 1.0 / k);
}

TEST_CASE("pg_microbatches without an agent or a plan gives the even split", "[unit]") {
  ::unsetenv("PEREGRINE_MICROBATCH_PLAN");
  Answer none = Ask(5, 1, 4);
  CHECK(none.rc == PG_NO_AGENT);
  CheckEven(none, 1, 4);
  PlanEnv env;
  Answer missing = Ask(5, 1, 4);
  CHECK(missing.rc == PG_NOT_FOUND);
  CheckEven(missing, 1, 4);
  CHECK(missing.err.empty());
  // Bad arguments.
  uint32_t count = 0;
  double scale = 0;
  char err[128];
  CHECK(pg_microbatches(5, 0, 0, nullptr, &count, &scale, err, sizeof(err)) == PG_ERROR);
  CHECK(std::string(err).find("default_count") != std::string::npos);
  CHECK(pg_microbatches(5, 0, 2, nullptr, nullptr, &scale, err, sizeof(err)) == PG_ERROR);
  CHECK(pg_microbatches(5, 0, 2, nullptr, &count, nullptr, nullptr, 0) == PG_ERROR);
}

TEST_CASE("pg_microbatches follows a plan from its from_step and sees it replaced", "[unit]") {
  PlanEnv env;
  Publish(env.path, PlanText("1,3", 4, 0.5, 10));
  Answer before = Ask(9, 1, 2);
  CHECK(before.rc == PG_NOT_FOUND);
  CheckEven(before, 1, 2);
  Answer r0 = Ask(10, 0, 2);
  CHECK(r0.rc == PG_OK);
  CHECK(r0.first == 0);
  CHECK(r0.count == 1);
  CHECK(r0.scale == 0.5);
  Answer r1 = Ask(11, 1, 2);
  CHECK(r1.rc == PG_OK);
  CHECK(r1.first == 1);
  CHECK(r1.count == 3);
  // The agent replaces the plan (same size: the new inode tells).
  Publish(env.path, PlanText("3,1", 4, 0.5, 10, 2));
  Answer r1b = Ask(12, 1, 2);
  CHECK(r1b.rc == PG_OK);
  CHECK(r1b.first == 3);
  CHECK(r1b.count == 1);
  // Three replicas, a scale that is not a short decimal.
  Publish(env.path, PlanText("2,5,2", 9, 1.0 / 3.0, 0, 3));
  Answer r2 = Ask(0, 2, 3);
  CHECK(r2.rc == PG_OK);
  CHECK(r2.first == 7);
  CHECK(r2.count == 2);
  CHECK(r2.scale == 1.0 / 3.0);
  // Removed: back to the even split.
  REQUIRE(std::remove(env.path.c_str()) == 0);
  Answer gone = Ask(13, 1, 2);
  CHECK(gone.rc == PG_NOT_FOUND);
  CheckEven(gone, 1, 2);
}

TEST_CASE("pg_microbatches names the file and the field of an unusable plan and never crashes", "[unit]") {
  PlanEnv env;
  struct Case {
    std::string text;
    uint32_t dp_rank;
    uint32_t default_count;
    std::string names;
  };
  const std::vector<Case> cases = {
      {PlanText("1,3", 4, 0.5, 0), 2, 2, "dp_rank 2"},
      {PlanText("1,3", 4, 0.5, 0), 0, 3, "global_micro_batches: 4, but 2 replicas x default_count 3"},
      {PlanText("1,0", 1, 0.5, 0), 0, 2, "counts[1]"},
      {PlanText("1,3", 5, 0.5, 0), 0, 2, "global_micro_batches: 5 but the counts sum to 4"},
      {"version=1\nplan_id=1\n", 0, 2, "from_step: missing"},
      {PlanText("1,3", 4, 0.5, 0) + "counts=2,2\n", 0, 2, "counts given twice"},
      {"not a plan", 0, 2, "line 1: not key=value"},
      {std::string(2 << 20, '#'), 0, 2, "larger than"},
  };
  for (const Case& c : cases) {
    INFO(c.text.substr(0, 200));
    Publish(env.path, c.text);
    Answer a = Ask(100, c.dp_rank, c.default_count);
    CHECK(a.rc == PG_ERROR);
    CHECK(a.err.find("micro-batch plan " + env.path + ": ") == 0);
    CHECK(a.err.find(c.names) != std::string::npos);
    CheckEven(a, c.dp_rank, c.default_count);  // the outputs still hold the even split
  }
  // A directory where the file should be.
  REQUIRE(std::remove(env.path.c_str()) == 0);
  std::filesystem::create_directory(env.path);
  Answer dir = Ask(1, 0, 2);
  CHECK(dir.rc == PG_ERROR);
  CHECK(dir.err.find(env.path) != std::string::npos);
  std::filesystem::remove(env.path);
  // Fuzzed files: an answer every time, an error message whenever it is PG_ERROR.
  std::mt19937_64 rng(7);
  const std::string base = PlanText("1,3", 4, 0.5, 0);
  for (int i = 0; i < 2000; ++i) {
    std::string text = base;
    for (int e = 0; e < 3; ++e) text[rng() % text.size()] = static_cast<char>(rng() % 256);
    Publish(env.path, text);
    Answer a = Ask(1, 1, 2);
    REQUIRE((a.rc == PG_OK || a.rc == PG_ERROR || a.rc == PG_NOT_FOUND));
    if (a.rc == PG_ERROR) CHECK_FALSE(a.err.empty());
    if (a.rc == PG_OK) CHECK(a.count >= 1);
  }
}

}  // namespace
}  // namespace peregrine
