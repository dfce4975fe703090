// The kind table, params, link-round plans, dcgmi JSON and the helper protocol (pure parts).
#include <catch2/catch.hpp>

#include "agent/diagnostics/dcgm_diag_json.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/agent_flags.h"
#include "agent/diagnostics/diagnostic_runner.h"

namespace peregrine {
namespace {

TEST_CASE("diagnostic kinds validate their params and name what is wrong", "[unit]") {
  struct Case {
    std::string kind;
    DiagnosticParamMap params;
    std::string error;  // empty: valid
  };
  const std::vector<Case> cases = {
      {"eud", {}, ""},
      {"eud", {{"level", "3"}}, ""},
      {"eud", {{"level", "9"}}, "eud: param level"},
      {"eud", {{"level", "x"}}, "eud: param level"},
      {"all_to_all", {{"bytes", "4096"}, {"min_gbps", "0.5"}}, ""},
      {"all_to_all", {{"bytes", "-1"}}, "all_to_all: param bytes"},
      {"all_to_all", {{"min_gbps", "fast"}}, "all_to_all: param min_gbps"},
      {"all_gather", {{"master_addr", "127.0.0.1"}, {"master_port", "1234"}, {"machines", "2"}, {"machine_index", "1"}},
       ""},
      {"all_gather", {{"master_port", "1234"}, {"machines", "2"}, {"machine_index", "1"}},
       "all_gather: param master_addr is required"},
      {"all_gather", {{"master_addr", "h"}, {"master_port", "1234"}, {"machines", "2"}, {"machine_index", "2"}},
       "all_gather: param machine_index"},
      {"alignment", {{"seed", "7"}, {"steps", "3"}}, ""},
      {"alignment", {{"steps", "0"}}, "alignment: param steps"},
      {"replay",
       {{"master_addr", "h"}, {"master_port", "1"}, {"machines", "1"}, {"machine_index", "0"}, {"tp", "2"}, {"pp", "1"},
        {"dp", "1"}},
       ""},
      {"replay",
       {{"master_addr", "h"}, {"master_port", "1"}, {"machines", "1"}, {"machine_index", "0"}, {"tp", "2"}, {"pp", "2"},
        {"dp", "1"}, {"layers", "3"}},
       "replay: param layers"},
      {"replay", {{"master_addr", "h"}, {"master_port", "1"}, {"machines", "1"}, {"machine_index", "0"}},
       "replay: param tp is required"},
      {"gemm", {{"dtype", "bf16"}, {"size", "256"}}, ""},
      {"gemm", {{"dtype", "int8"}}, "gemm: param dtype"},
      {"gemm", {{"min_ratio", "2"}}, "gemm: param min_ratio"},
      {"p2p_rounds",
       {{"master_addr", "h"}, {"master_port", "9"}, {"ranks", "4"}, {"rank_base", "2"}, {"rounds", "r0:0>1,2>3;r1:1>2"}},
       ""},
      {"p2p_rounds",
       {{"master_addr", "h"}, {"master_port", "9"}, {"ranks", "4"}, {"rank_base", "2"}, {"rounds", "r0:0>1,1>3"}},
       "p2p_rounds: param rounds: rank 1 used twice in round r0"},
      {"p2p_rounds",
       {{"master_addr", "h"}, {"master_port", "9"}, {"ranks", "4"}, {"rank_base", "2"}, {"rounds", "r1:0>1"}},
       "p2p_rounds: param rounds"},
      {"fsck", {}, "unknown diagnostic kind \"fsck\""},
  };
  for (const Case& c : cases) {
    INFO(c.kind << " " << c.error);
    absl::Status s = ValidateDiagnostic(c.kind, c.params);
    if (c.error.empty()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.message()), Catch::Contains(c.error));
    }
  }
}

TEST_CASE("diagnostic timeouts are the command timeout or the kind's default", "[unit]") {
  CHECK(DiagnosticTimeout("eud", {}, 1500) == absl::Milliseconds(1500));
  CHECK(DiagnosticTimeout("eud", {}, 0) == absl::Minutes(2));
  CHECK(DiagnosticTimeout("eud", {{"level", "3"}}, 0) == absl::Minutes(45));
  CHECK(DiagnosticTimeout("all_to_all", {}, 0) == absl::Seconds(60));
  CHECK(DiagnosticTimeout("replay", {}, 0) == absl::Seconds(600));
}

// DCGM 3.x shape (dcgmi diag -r 1 -j): "DCGM GPU Diagnostic", results keyed by gpu_ids.
constexpr char kDcgm3Fail[] = R"(Successfully ran diagnostic for group.
{
  "DCGM GPU Diagnostic" : {
    "test_categories" : [
      { "category" : "Deployment",
        "tests" : [
          { "name" : "Denylist", "results" : [ { "status" : "Pass" } ] },
          { "name" : "NVML Library", "results" : [ { "status" : "Pass" } ] } ] },
      { "category" : "Integration",
        "tests" : [
          { "name" : "PCIe",
            "results" : [
              { "gpu_ids" : "0", "status" : "Pass" },
              { "gpu_ids" : "1", "status" : "Fail",
                "warnings" : [ "GPU 1 Error: pcie replay count 87 exceeds threshold" ] } ] } ] } ],
    "version" : "3.3.5"
  }
})";

// DCGM 4.x shape: "DCGM Diagnostic", results keyed by entity_group / entity_id.
constexpr char kDcgm4Fail[] = R"({
  "DCGM Diagnostic": {
    "test_categories": [
      { "category": "Deployment",
        "tests": [ { "name": "software",
                     "results": [ { "entity_group": "GPU", "entity_id": 0, "status": "Pass" },
                                  { "entity_group": "GPU", "entity_id": 3, "status": "Fail",
                                    "warnings": [ { "error_category": 8, "error_id": 29, "error_severity": 5,
                                                    "warning": "Persistence mode for GPU 3 is disabled." } ] } ],
                     "test_summary": { "status": "Fail" } } ] },
      { "category": "Hardware",
        "tests": [ { "name": "memory",
                     "results": [ { "entity_group": "GPU", "entity_id": 0, "status": "Pass" },
                                  { "entity_group": "GPU", "entity_id": 3, "status": "Skip" } ],
                     "test_summary": { "status": "Pass" } } ] } ]
  },
  "metadata": { "version": "4.2.3" }
})";

constexpr char kDcgm4Pass[] = R"({"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
  {"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"},
                                   {"entity_group": "GPU", "entity_id": 1, "status": "Warn"}],
   "test_summary": {"status": "Pass"}}]}]}})";

TEST_CASE("dcgmi diag JSON: failed tests and GPUs from both DCGM generations, garbage is an error", "[unit]") {
  auto v3 = ParseDcgmDiagJson(kDcgm3Fail);
  REQUIRE(v3.ok());
  CHECK(v3->tests == 3);
  CHECK_FALSE(v3->passed());
  CHECK(v3->FailedGpus() == std::set<int>{1});
  REQUIRE(v3->failures.size() == 1);
  CHECK(v3->failures[0].test == "PCIe");
  CHECK_THAT(v3->failures[0].warning, Catch::Contains("pcie replay count"));

  auto v4 = ParseDcgmDiagJson(kDcgm4Fail);
  REQUIRE(v4.ok());
  CHECK(v4->tests == 2);
  CHECK(v4->FailedGpus() == std::set<int>{3});
  CHECK_THAT(v4->failures[0].warning, Catch::Contains("Persistence mode"));

  auto pass = ParseDcgmDiagJson(kDcgm4Pass);
  REQUIRE(pass.ok());
  CHECK(pass->passed());

  auto runtime = ParseDcgmDiagJson(R"({"DCGM Diagnostic": {"runtime_error": "Unable to connect to host engine"}})");
  REQUIRE(runtime.ok());
  CHECK_FALSE(runtime->passed());

  for (const char* garbage : {"", "Error: unable to establish a connection", "{\"DCGM GPU Diagnostic\": ", "[1,2]",
                              R"({"something": {"else": 1}})"}) {
    INFO(garbage);
    CHECK(ParseDcgmDiagJson(garbage).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("the helper's command line and output become the CommandResult", "[unit]") {
  DiagnosticRunRequest request;
  request.kind = "eud";
  request.machine_id = "7";
  request.gpus = 4;
  request.rank_base = 8;
  request.params = {{"level", "2"}};
  request.command = {"sim-trainer", "--steps", "5"};
  request.code_env = {{"A", "b=c"}};
  const std::vector<std::string> argv = DiagnoseHelperArgv("/bin/peregrine-diagnose", request, absl::Seconds(3), "/p");
  const std::vector<std::string> want = {"/bin/peregrine-diagnose", "--kind", "eud", "--timeout-ms", "3000",
                                         "--machine-id", "7", "--gpus", "4", "--rank-base", "8", "--pid-file", "/p",
                                         "--param", "level=2", "--command-arg", "sim-trainer", "--command-arg",
                                         "--steps", "--command-arg", "5", "--code-env", "A=b=c"};
  CHECK(argv == want);

  HelperRun ok;
  ok.output = "noise\npperegrine-diagnose: result x\n"
              "peregrine-diagnose: result passed: false detail: \"gpu1: bad\" failed_ranks: 9 figures { key: \"a\" "
              "value: 1.5 }\n";
  auto [status, result] = InterpretHelperRun(ok, request, absl::Seconds(3), 0.25);
  CHECK(status.code() == 0);
  CHECK_FALSE(result.passed());
  CHECK(result.detail() == "gpu1: bad");
  CHECK(result.failed_ranks_size() == 1);
  CHECK(result.figures().at("a") == 1.5);
  CHECK(result.kind() == "eud");
  CHECK(result.machine_id() == "7");
  CHECK(result.seconds() == 0.25);

  HelperRun killed;
  killed.timed_out = true;
  killed.signal = 9;
  auto [kstatus, kresult] = InterpretHelperRun(killed, request, absl::Seconds(3), 23);
  CHECK(kstatus.code() == 0);
  CHECK_FALSE(kresult.passed());
  CHECK(kresult.detail() == "timed out after 3000 ms");

  // A helper that refused its request (exit 2) or crashed: an error status naming why.
  struct Failed {
    const char* name;
    int exit_code;
    int signal;
    const char* output;
    int code;  // the status code the command's result carries
    const char* message;
  };
  const Failed failed[] = {
      {"invalid request", 2, 0, "peregrine-diagnose: invalid: replay: param tp: 3 GPUs do not fit\n", 3,
       "replay: param tp"},
      {"crashed", 0, 11, "something broke\n", 13, "something broke"},
  };
  for (const Failed& f : failed) {
    INFO(f.name);
    HelperRun run;
    run.exit_code = f.exit_code;
    run.signal = f.signal;
    run.output = f.output;
    const v1::Status status = InterpretHelperRun(run, request, absl::Seconds(3), 0.1).first;
    CHECK(status.code() == f.code);
    CHECK_THAT(status.message(), Catch::Contains(f.message));
  }
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("agent flags for diagnostics", "[unit]") {
  auto none = [](std::string_view) -> std::optional<std::string> { return std::nullopt; };
  auto parsed = ParseAgentFlags({"--controller", "c:1", "--job", "a/b", "--pod", "p", "--diagnose-bin", "/x/diag",
                                 "--gpus-per-machine", "8"},
                                none);
  REQUIRE(parsed.ok());
  CHECK(parsed->options.diagnose_binary == "/x/diag");
  CHECK(parsed->options.gpus_per_machine == 8);
  auto env = [](std::string_view name) -> std::optional<std::string> {
    if (name == "PEREGRINE_GPUS_PER_MACHINE") return std::string("lots");
    return std::nullopt;
  };
  auto bad = ParseAgentFlags({"--controller", "c:1", "--job", "a/b", "--pod", "p"}, env);
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("PEREGRINE_GPUS_PER_MACHINE"));
}

}  // namespace
}  // namespace peregrine
