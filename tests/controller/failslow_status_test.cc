// A fail-slow finding with its validation survives the status JSON round trip (what the
// controller persists in the TrainingJob status and reads back after a restart).
#include <catch2/catch.hpp>

#include "controller/status_json.h"

namespace peregrine {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000'000;
constexpr int64_t kSec = 1'000'000'000;

TEST_CASE("status JSON round-trips a fail-slow finding with its validation", "[unit]") {
  JobStatus s;
  FailSlowFinding f;
  f.id = 4;
  f.state = FailSlowState::kLocalized;
  f.kind = FailSlowKind::kComputeAndCommunication;
  f.ranks = {5};
  f.group = "dp 0, dp 1";
  f.machines = {"12", "10", "11"};
  f.severity = 0.9;
  f.tier = FailSlowTier::kReplace;
  f.onset = kT0;
  f.detected_at = kT0 + 2 * kSec;
  f.localized_at = kT0 + 4 * kSec;
  f.detail = "rank 5 arrives last";
  FailSlowValidation& v = f.validation;
  v.state = ValidationState::kLinks;
  v.pass = 2;
  v.verdict = ValidationVerdict::kConfirmed;
  v.started_at = kT0 + 5 * kSec;
  v.phase_started_at = kT0 + 7 * kSec;
  v.machines = {"10", "11", "12"};
  v.link_kinds = "tp,pp,dp";
  v.master_addr = "127.0.0.1";
  v.master_port = 40123;
  v.slow_gpus = {5};
  v.slow_links = {"dp 0->2", "dp 2->0"};
  v.detail = "GEMM on 6 GPUs";
  FailSlowFinding plain;  // never validated: no validation object is written
  plain.id = 3;
  plain.state = FailSlowState::kRecovered;
  s.fail_slows = {plain, f};
  const std::string text = JobStatusToJson(s);
  auto back = JobStatusFromJson(text);
  REQUIRE(back.ok());
  REQUIRE(back->fail_slows.size() == 2);
  CHECK(back->fail_slows[0].validation.state == ValidationState::kNotStarted);
  CHECK(text.find("\"validation\"") == text.rfind("\"validation\""));  // only once
  const FailSlowFinding& g = back->fail_slows[1];
  CHECK(g.kind == f.kind);
  CHECK(g.ranks == f.ranks);
  CHECK(g.group == f.group);
  CHECK(g.machines == f.machines);
  const FailSlowValidation& w = g.validation;
  CHECK(w.state == v.state);
  CHECK(w.pass == 2);
  CHECK(w.verdict == v.verdict);
  CHECK(w.started_at == v.started_at);
  CHECK(w.phase_started_at == v.phase_started_at);
  CHECK(w.ended_at == 0);
  CHECK(w.machines == v.machines);
  CHECK(w.link_kinds == v.link_kinds);
  CHECK(w.master_addr == v.master_addr);
  CHECK(w.master_port == v.master_port);
  CHECK(w.slow_gpus == v.slow_gpus);
  CHECK(w.slow_links == v.slow_links);
  CHECK(w.detail == v.detail);
}

}  // namespace
}  // namespace peregrine
