// peregrinectl analyze fr: PyTorch NCCL flight recorder dumps. The dumps are built by us
// (testdata/make_fr_dumps.py, run with /usr/bin/python3 at test time) in the 2.x layout
// PyTorch documents, because the PyTorch installed here (1.13) has no flight recorder; most
// are written in libtorch's own pickle byte form, some by Python's pickle (protocols 2, 4,
// 5), one set gzip-compressed.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/analyze/flight_recorder.h"
#include "cli/analyze/fr_command.h"
#include "tests/cli/analyze/analyze_test_util.h"
#include "tests/testing/child_process.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using nlohmann::json;
using testing::TempDir;

// The generated dumps, one directory per case, in a temporary directory of the test.
class Dumps {
 public:
  Dumps() {
    const std::string err = dir_.Path("make_fr_dumps.stderr");
    testing::ChildProcess::Options options;
    options.argv = {"/usr/bin/python3", analyze_test::Fixture("make_fr_dumps.py"), dir_.Path("cases")};
    options.stderr_path = err;
    auto child = testing::ChildProcess::Start(options);
    REQUIRE(child != nullptr);
    const std::optional<int> status = child->Wait(std::chrono::seconds(120));
    INFO(testing::ReadFileIfExists(err));
    REQUIRE(testing::ExitedWith(status, 0));
  }
  std::string Case(const std::string& name) const { return dir_.Path("cases/" + name); }

 private:
  TempDir dir_{"fr-dumps"};
};

json Group(const json& report, const std::string& name) {
  for (const json& g : report["groups"]) {
    if (g["name"] == name) return g;
  }
  FAIL("no group " << name << " in " << report.dump(1));
  return {};
}

TEST_CASE("analyze fr: built 2.x dumps, one rank missing from an all_reduce the others wait in", "[unit]") {
  const Dumps dumps;
  for (const std::string name : {"missing_rank", "missing_rank_tags", "missing_rank_gz"}) {
    INFO(name);
    const json j = Analyze({"fr", dumps.Case(name), "--json"}).Json();
    INFO(j.dump(1));
    CHECK(j["ranks"] == json::array({0, 1, 2, 3}));
    CHECK(j["versions"] == json::array({"2.10"}));
    CHECK(j["skippedFiles"].empty());
    REQUIRE(j["groups"].size() == 1);
    const json g = Group(j, "0");
    CHECK(g["desc"] == "default_pg");
    CHECK(g["ranks"] == json::array({0, 1, 2, 3}));
    CHECK(g["verdict"] == "missing-ranks");
    CHECK(g["stuckCollective"]["seq"] == 5);
    CHECK(g["stuckCollective"]["op"] == "nccl:all_reduce");
    CHECK(g["stuckCollective"]["detail"] == "in [[1024]] [Float], out [[1024]] [Float]");
    CHECK(g["waitingRanks"] == json::array({0, 1, 3}));
    CHECK(g["missingRanks"] == json::array({2}));
    CHECK(g["mismatches"].empty());
    CHECK(g["rankStates"][2]["lastSeq"] == 4);
    CHECK(g["rankStates"][2]["lastState"] == "completed");
    CHECK(g["rankStates"][0]["lastState"] == "started");
  }
  const analyze_test::Result text = Analyze({"fr", dumps.Case("missing_rank")});
  REQUIRE(text.code == 0);
  INFO(text.out);
  CHECK(absl::StrContains(text.out, "stuck collective: nccl:all_reduce (collective seq 5)"));
  CHECK(absl::StrContains(text.out, "missing ranks: 2\n"));
  CHECK(absl::StrContains(text.out, "rank 2: seq 4 nccl:all_reduce completed"));
  CHECK(absl::StrContains(text.out,
                          "verdict: missing-ranks: ranks 2 never reached nccl:all_reduce (collective seq 5) that "
                          "ranks 0-1,3 are waiting in"));
}

TEST_CASE("analyze fr: built 2.x dumps, all_gather against all_reduce at one seq id is a mismatch", "[unit]") {
  const Dumps dumps;
  const json j = Analyze({"fr", dumps.Case("mismatch"), "--json"}).Json();
  INFO(j.dump(1));
  const json g = Group(j, "0");
  CHECK(g["verdict"] == "mismatch");
  REQUIRE(g["mismatches"].size() == 1);
  const json m = g["mismatches"][0];
  CHECK(m["seq"] == 5);
  CHECK(m["field"] == "operation");
  CHECK(m["found"] == "nccl:all_gather");
  CHECK(m["ranks"] == json::array({2}));
  CHECK(m["expected"] == "nccl:all_reduce");
  CHECK(m["expectedRanks"] == json::array({0, 1, 3}));
  CHECK(g["missingRanks"].empty());
  CHECK(absl::StrContains(g["explanation"].get<std::string>(),
                          "desync at collective seq 5: ranks 2 have operation nccl:all_gather where ranks 0-1,3"));
}

TEST_CASE("analyze fr: built 2.x dumps where every rank is in the collective and none completed it", "[unit]") {
  const Dumps dumps;
  const json j = Analyze({"fr", dumps.Case("all_stuck"), "--json"}).Json();
  INFO(j.dump(1));
  const json g = Group(j, "0");
  CHECK(g["verdict"] == "all-stuck");
  CHECK(g["waitingRanks"] == json::array({0, 1, 2, 3}));
  CHECK(g["missingRanks"].empty());
  CHECK(g["stuckCollective"]["seq"] == 5);
}

TEST_CASE("analyze fr: built 2.x dumps of a healthy job, by libtorch's pickler and Python's protocols 2/4/5", "[unit]") {
  const Dumps dumps;
  for (const std::string name : {"healthy", "healthy_py2", "healthy_py4", "healthy_py5"}) {
    INFO(name);
    const json j = Analyze({"fr", dumps.Case(name), "--json"}).Json();
    INFO(j.dump(1));
    const json g = Group(j, "0");
    CHECK(g["verdict"] == "healthy");
    CHECK(g["stuckCollective"].is_null());
    CHECK(g["missingRanks"].empty());
    CHECK(g["rankStates"][3]["lastSeq"] == 6);
    CHECK(j["dumps"][0]["entries"] == 6);
    CHECK(j["dumps"][0]["commLibVersion"] == "2.21.5");
  }
}

TEST_CASE("analyze fr: built 2.x dumps with several process groups name the group and the rank stuck elsewhere", "[unit]") {
  const Dumps dumps;
  const json j = Analyze({"fr", dumps.Case("multi_pg"), "--json"}).Json();
  INFO(j.dump(1));
  REQUIRE(j["groups"].size() == 3);
  const json world = Group(j, "0");
  const json tp1 = Group(j, "1");
  const json tp2 = Group(j, "2");
  CHECK(tp1["verdict"] == "healthy");
  CHECK(tp1["ranks"] == json::array({0, 1}));
  CHECK(tp2["verdict"] == "missing-ranks");
  CHECK(tp2["ranks"] == json::array({2, 3}));
  CHECK(tp2["stuckCollective"]["op"] == "nccl:_reduce_scatter_base");
  CHECK(tp2["waitingRanks"] == json::array({2}));
  CHECK(tp2["missingRanks"] == json::array({3}));
  CHECK(absl::StrContains(tp2["rankStates"][1]["pendingElsewhere"].get<std::string>(),
                          "group 0: nccl:all_reduce (collective seq 4, started)"));
  // In the default group rank 3 entered #4, the others never did.
  CHECK(world["verdict"] == "missing-ranks");
  CHECK(world["waitingRanks"] == json::array({3}));
  CHECK(world["missingRanks"] == json::array({0, 1, 2}));
}

TEST_CASE("analyze fr: built 2.x dumps with a pending send whose recv was never posted", "[unit]") {
  const Dumps dumps;
  const json j = Analyze({"fr", dumps.Case("p2p"), "--json"}).Json();
  INFO(j.dump(1));
  const json g = Group(j, "0");
  CHECK(g["verdict"] == "p2p-unmatched");
  REQUIRE(g["p2p"].size() == 1);
  CHECK(g["p2p"][0] ==
        "rank 0: nccl:send 0->1 (started): rank 1 posted 1 matching recv(s) for 2 send(s): the peer never posted it");
  CHECK(g["stuckCollective"].is_null());
}

TEST_CASE("analyze fr: garbage files are named with their reason and the other ranks still analysed", "[unit]") {
  const Dumps dumps;
  const json j = Analyze({"fr", dumps.Case("garbage"), "--json"}).Json();
  INFO(j.dump(1));
  CHECK(j["ranks"] == json::array({0, 1}));
  std::map<std::string, std::string> skipped;
  for (const json& s : j["skippedFiles"]) {
    const std::string path = s["path"];
    skipped[path.substr(path.rfind('/') + 1)] = s["reason"];
  }
  REQUIRE(skipped.size() == 5);
  CHECK(absl::StrContains(skipped["nccl_trace_rank_2"], "truncated"));
  CHECK(absl::StartsWith(skipped["nccl_trace_rank_2"], "offset "));
  CHECK(skipped["nccl_trace_rank_3"] == "flight recorder version '1.0' is not supported (this reader knows 2.x)");
  CHECK(absl::StartsWith(skipped["nccl_trace_rank_4"], "not a pickle"));
  CHECK(absl::StrContains(skipped["nccl_trace_rank_5"], "refusing to call 'os.system'"));
  CHECK(skipped["README"] == "no rank number at the end of the file name");
  // Rank 1: the entry without collective_seq_id is skipped and counted, the rest read.
  CHECK(j["dumps"][1]["skippedEntries"] == 1);
  CHECK(j["dumps"][1]["entries"] == 4);
  CHECK(j["dumps"][1]["notes"][0] == "entry 1 skipped: no 'collective_seq_id' integer");
  // Ranks 2 and 3 are members without a readable dump.
  const json g = Group(j, "0");
  CHECK(g["noDumpRanks"] == json::array({2, 3}));
  CHECK(g["verdict"] == "missing-dumps");
  CHECK(g["waitingRanks"] == json::array({0, 1}));
  CHECK(g["explanation"] ==
        "ranks 0-1 wait in nccl:all_reduce (collective seq 5); ranks 2-3 left no readable dump and may be the ones "
        "that never reached it");

  const analyze_test::Result text = Analyze({"fr", dumps.Case("garbage")});
  REQUIRE(text.code == 0);
  CHECK(absl::StrContains(text.out, "skipped " + dumps.Case("garbage") + "/nccl_trace_rank_3: flight recorder version '1.0'"));
}

TEST_CASE("analyze fr: --prefix, no readable dump, not a directory, usage", "[unit]") {
  const Dumps dumps;
  CHECK(FrRankFromFileName("nccl_trace_rank_12", "") == 12);
  CHECK(FrRankFromFileName("nccl_trace_rank_12.gz", "") == 12);
  CHECK(FrRankFromFileName("dump7.pkl", "") == 7);
  CHECK(FrRankFromFileName("nccl_trace_rank_12", "nccl_trace_rank_") == 12);
  CHECK_FALSE(FrRankFromFileName("other_12", "nccl_trace_rank_").has_value());
  CHECK_FALSE(FrRankFromFileName("nccl_trace_rank_1x", "nccl_trace_rank_").has_value());
  CHECK_FALSE(FrRankFromFileName("README", "").has_value());

  TempDir dir("fr-prefix");
  for (int r = 0; r < 4; ++r) {
    const std::string name = absl::StrCat("nccl_trace_rank_", r);
    testing::WriteFile(dir.Path(absl::StrCat("fr_", r)), testing::ReadFile(dumps.Case("missing_rank") + "/" + name));
  }
  testing::WriteFile(dir.Path("other_9"), "x");
  const json j = Analyze({"fr", dir.path(), "--prefix", "fr_", "--json"}).Json();
  CHECK(j["ranks"] == json::array({0, 1, 2, 3}));
  REQUIRE(j["skippedFiles"].size() == 1);
  CHECK(j["skippedFiles"][0]["reason"] == "the name is not 'fr_' followed by a rank number");

  TempDir empty("fr-empty");
  testing::WriteFile(empty.Path("nccl_trace_rank_0"), "garbage");
  analyze_test::Result r = Analyze({"fr", empty.path()});
  CHECK(r.code == 1);
  CHECK(absl::StrContains(r.err, "no flight recorder dump could be read"));
  CHECK(absl::StrContains(r.err, "nccl_trace_rank_0: not a pickle"));
  r = Analyze({"fr", empty.Path("nccl_trace_rank_0")});
  CHECK(r.code == 1);
  CHECK(absl::StrContains(r.err, "not a directory"));
  r = Analyze({"fr"});
  CHECK(r.code == 2);
  CHECK(absl::StrContains(r.err, "needs exactly one DIR"));
  r = Analyze({"fr", empty.path(), "--rank", "1"});
  CHECK(r.code == 2);
  CHECK(absl::StrContains(r.err, "unknown flag --rank"));
  CHECK(absl::StrContains(Analyze({"--help"}).out, "peregrinectl analyze fr DIR [--prefix P] [--json]"));
}

TEST_CASE("flight recorder: an entry without optional fields is read - a dump that is not a dict is refused", "[unit]") {
  // Only the fields the analysis needs: {version, entries: [{profiling_name, collective_seq_id, pg_id, state}]}
  // written the libtorch way by hand.
  using namespace std::string_literals;
  const std::string minimal =
      "\x80\x02}(X\x07\x00\x00\x00version"s + "X\x03\x00\x00\x00"s + "2.1"s + "X\x07\x00\x00\x00"s + "entries"s +
      "](}(X\x0e\x00\x00\x00profiling_nameX\x0f\x00\x00\x00nccl:all_reduce"s +
      "X\x11\x00\x00\x00"s + "collective_seq_idK\x03"s + "X\x05\x00\x00\x00pg_idK\x00"s +
      "X\x05\x00\x00\x00stateX\x09\x00\x00\x00scheduled"s + "ueu."s;
  absl::StatusOr<FrDump> d = ParseFlightRecorderDump(minimal, "m");
  INFO(d.status());
  REQUIRE(d.ok());
  REQUIRE(d->entries.size() == 1);
  CHECK(d->entries[0].op == "all_reduce");
  CHECK(d->entries[0].pg_name == "0");
  CHECK(d->entries[0].collective_seq_id == 3);
  CHECK(d->entries[0].state == FrState::kScheduled);
  CHECK_FALSE(d->entries[0].timeout_ms.has_value());

  absl::StatusOr<FrDump> list = ParseFlightRecorderDump("\x80\x02]."s, "l");
  REQUIRE_FALSE(list.ok());
  CHECK(list.status().message() == "l: the pickle holds a list, not the flight recorder's dict");
  absl::StatusOr<FrDump> none = ParseFlightRecorderDump("\x80\x02}."s, "n");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message() == "n: no 'version' string: not a flight recorder dump");
}

}  // namespace
}  // namespace peregrine
