// peregrinectl analyze stacks: per-rank files (the real gdb / eu-stack captures and the
// py-spy sample of tests/diagnosis/testdata/stacks), rank rules, aggregation, errors; and the
// peregrinectl dispatch.
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/analyze/stack_files.h"
#include "cli/peregrinectl.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using testing::ReadFile;
using analyze_test::StackFixture;
using testing::TempDir;
using testing::WriteFile;

const std::vector<std::string> kLayout1x2x2 = {"--tp", "1", "--pp", "2", "--dp", "2", "--gpus-per-machine", "1"};

std::vector<std::string> Args(const std::string& dir, std::vector<std::string> layout, bool json) {
  std::vector<std::string> args = {"stacks", dir};
  args.insert(args.end(), layout.begin(), layout.end());
  if (json) args.push_back("--json");
  return args;
}

TEST_CASE("analyze stacks: real gdb captures named gdb_rankN.txt find the hung rank", "[unit]") {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    const std::string name = absl::StrCat("gdb_rank", r, ".txt");
    WriteFile(dir.Path(name), ReadFile(StackFixture(name)));
  }
  const nlohmann::json j = Analyze(Args(dir.path(), kLayout1x2x2, true)).Json();
  INFO(j.dump(1));
  REQUIRE(j["files"].size() == 4);
  CHECK(j["files"][0]["tool"] == "gdb");
  CHECK(j["files"][0]["rankFrom"] == "file name (rank-N)");
  CHECK(j["missingRanks"].empty());
  REQUIRE(j["groups"].size() == 2);
  CHECK(j["groups"][0]["ranks"] == nlohmann::json::array({0, 1, 2}));
  CHECK(j["groups"][0]["dominant"] == true);
  CHECK(j["suspectRanks"] == nlohmann::json::array({3}));
  CHECK(j["chosenGroup"]["kind"] == "tp");
  CHECK(j["machinesToEvict"] == nlohmann::json::array({3}));
  CHECK(j["explanation"].get<std::string>().find("RecvActivations") != std::string::npos);

  analyze_test::Result text = Analyze(Args(dir.path(), kLayout1x2x2, false));
  REQUIRE(text.code == 0);
  CHECK(text.out.find("group 0 (dominant: healthy): 3 rank(s) [0-2]") != std::string::npos);
  CHECK(text.out.find("suspect ranks: 3") != std::string::npos);
  CHECK(text.out.find("machines to evict: 3") != std::string::npos);
}

TEST_CASE("analyze stacks: eu-stack captures named stack.N.txt, one rank missing", "[unit]") {
  TempDir dir;
  for (int r : {0, 1, 3}) {
    WriteFile(dir.Path(absl::StrCat("stack.", r, ".txt")), ReadFile(StackFixture(absl::StrCat("eustack_rank", r, ".txt"))));
  }
  const nlohmann::json j = Analyze(Args(dir.path(), kLayout1x2x2, true)).Json();
  INFO(j.dump(1));
  CHECK(j["files"][0]["tool"] == "eu-stack");
  CHECK(j["files"][0]["rankFrom"] == "file name (last number)");
  CHECK(j["missingRanks"] == nlohmann::json::array({2}));
  // Rank 2 has no stack (itself suspicious) and rank 3 is in a different frame: they
  // share the DP group of pipeline stage 1, machines 2 and 3.
  CHECK(j["suspectRanks"] == nlohmann::json::array({2, 3}));
  CHECK(j["machinesToEvict"] == nlohmann::json::array({2, 3}));
}

TEST_CASE("analyze stacks: py-spy dumps with 'rank: N' header lines, several files per rank", "[unit]") {
  // TP=2 PP=2 DP=2, 2 GPUs per machine: machine m holds ranks 2m and 2m+1.
  TempDir dir;
  const std::string pyspy = ReadFile(StackFixture("pyspy_dump_rank5.txt"));
  for (int r = 0; r < 8; ++r) {
    std::string text = pyspy;
    if (r == 5) text = absl::StrReplaceAll(text, {{"all_gather_into_tensor", "barrier"}});
    WriteFile(dir.Path(absl::StrCat("trainer-", std::string(1, static_cast<char>('a' + r)), ".txt")),
             absl::StrCat("Rank: ", r, "\n", text));
  }
  // A second capture of rank 0 (a helper process, gdb) in a file named by rule 2.
  WriteFile(dir.Path("rank-0.gdb"), ReadFile(StackFixture("gdb_rank0.txt")));
  const std::vector<std::string> layout = {"--tp", "2", "--pp", "2", "--dp", "2", "--gpus-per-machine", "2"};
  const nlohmann::json j = Analyze(Args(dir.path(), layout, true)).Json();
  INFO(j.dump(1));
  REQUIRE(j["files"].size() == 9);
  CHECK(j["files"][0]["rank"] == 0);
  CHECK(j["files"][2]["rankFrom"] == "header line");
  // Rank 0's extra process makes its signature differ, as does rank 5's frame.
  CHECK(j["suspectRanks"] == nlohmann::json::array({0, 5}));
  // Ranks 0 and 5 share no TP, PP or DP group: the union of their machines.
  CHECK(j["machinesToEvict"] == nlohmann::json::array({0, 2}));

  // With rank 0's helper removed, only rank 5 remains: its TP group, machine 2.
  std::filesystem::remove(dir.Path("rank-0.gdb"));
  const nlohmann::json k = Analyze(Args(dir.path(), layout, true)).Json();
  CHECK(k["suspectRanks"] == nlohmann::json::array({5}));
  CHECK(k["chosenGroup"]["kind"] == "tp");
  CHECK(k["machinesToEvict"] == nlohmann::json::array({2}));
}

TEST_CASE("analyze stacks: a 16-rank tie is broken by the rank idling in its DataLoader", "[unit]") {
  TempDir dir;
  for (int r = 0; r < 16; ++r) {
    const std::string name = absl::StrCat("rank-", r, ".txt");
    WriteFile(dir.Path(name), ReadFile(StackFixture("tie_dataloader/" + name)));
  }
  const std::vector<std::string> layout = {"--tp", "1", "--pp", "2", "--dp", "8", "--gpus-per-machine", "4"};
  const nlohmann::json j = Analyze(Args(dir.path(), layout, true)).Json();
  INFO(j.dump(1));
  REQUIRE(j["groups"].size() == 4);
  CHECK(j["groups"][0]["kind"] == "collective wait");
  CHECK(j["groups"][2]["ranks"] == nlohmann::json::array({5}));
  CHECK(j["groups"][2]["kind"] == "data loading");
  CHECK(j["groups"][2]["suspect"] == true);
  CHECK(j["groups"][2]["distinguishingFrames"][0] == "wait @ threading.py");
  CHECK(j["suspectRanks"] == nlohmann::json::array({5}));
  CHECK(j["machinesToEvict"] == nlohmann::json::array({1}));
  CHECK(j["confidence"] == "high");
  CHECK(j["confidenceReason"].get<std::string>().find("tie broken by idle signature") != std::string::npos);
  CHECK(j["skippedFiles"] == 0);

  analyze_test::Result text = Analyze(Args(dir.path(), layout, false));
  REQUIRE(text.code == 0);
  CHECK(text.out.find("group 0 (dominant: healthy): 7 rank(s) [0-4,6-7] on machine(s) [0-1], collective wait in "
                      "all_gather_coalesced @ partition_parameters.py") != std::string::npos);
  CHECK(text.out.find("group 2 (suspect): 1 rank(s) [5] on machine(s) [1], data loading in _try_get_data @ "
                      "dataloader.py") != std::string::npos);
  CHECK(text.out.find("only here: wait @ threading.py <- get @ queue.py <- _try_get_data @ dataloader.py") !=
        std::string::npos);
  CHECK(text.out.find("suspect ranks: 5\n") != std::string::npos);
  CHECK(text.out.find("machines to evict: 1\n") != std::string::npos);
  CHECK(text.out.find("confidence: high (tie broken by idle signature") != std::string::npos);
}

TEST_CASE("analyze stacks: truncated, mixed and hostile files still yield the ranks that parse", "[unit]") {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    const std::string name = absl::StrCat("gdb_rank", r, ".txt");
    WriteFile(dir.Path(name), ReadFile(StackFixture(name)));
  }
  // Rank 3: the real capture cut in the middle of its last frame line (a dump truncated by
  // a full disk or a killed capture): that line is skipped and counted.
  std::string cut = ReadFile(StackFixture("gdb_rank3.txt"));
  const size_t last_frame = cut.rfind("\n#");
  REQUIRE(last_frame != std::string::npos);
  cut = cut.substr(0, last_frame + 5);  // "\n#4  0" of the last frame
  WriteFile(dir.Path("gdb_rank3.txt"), cut);
  // Hostile and foreign files next to them: skipped with their reason.
  WriteFile(dir.Path("rank-7.txt"), std::string("\x7f" "ELF\0\0\x02\x01", 8));
  WriteFile(dir.Path("notes-rank-1.txt"), "Segmentation fault (core dumped)\n");
  analyze_test::Result r = Analyze(Args(dir.path(), kLayout1x2x2, true));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["files"].size() == 4);
  CHECK(j["skippedFiles"] == 2);
  CHECK(j["skippedLines"] == 1);
  CHECK(j["suspectRanks"] == nlohmann::json::array({3}));  // the verdict survives the bad input
  CHECK(r.err.find("gdb_rank3.txt:") != std::string::npos);
  CHECK(r.err.find("(line skipped)") != std::string::npos);
  CHECK(r.err.find("rank-7.txt: binary data") != std::string::npos);
  CHECK(r.err.find("notes-rank-1.txt: not a stack dump") != std::string::npos);
  // A file mostly garbage fails, naming its first bad line; alone in its directory, so does the run.
  TempDir bad;
  WriteFile(bad.Path("rank-0.txt"), "Thread 1 (Thread 0x7f (LWP 12) \"x\"):\n#0  0x1 in f () from /lib/a.so\n#zz\n#yy\n#xx\n");
  analyze_test::Result b = Analyze(Args(bad.path(), kLayout1x2x2, false));
  CHECK(b.code == 1);
  CHECK(b.err.find("rank-0.txt:3:") != std::string::npos);
}

TEST_CASE("analyze stacks: rank rules", "[unit]") {
  CHECK(RankFromFileName("rank-3.txt") == 3);
  CHECK(RankFromFileName("rank_3.log") == 3);
  CHECK(RankFromFileName("gdb_rank12.txt") == 12);
  CHECK(RankFromFileName("RANK.7.pyspy") == 7);
  CHECK(RankFromFileName("node2-rank-5.txt") == 5);  // the rank, not the node number
  CHECK(RankFromFileName("stack.3.txt") == 3);
  CHECK(RankFromFileName("dump-07.log") == 7);
  CHECK(RankFromFileName("stacks.txt") == std::nullopt);
  absl::StatusOr<RankStackFile> f =
      ParseRankStackText(absl::StrCat("\n  rank = 6\n", ReadFile(StackFixture("eustack_rank1.txt"))), "/x/rank-1.txt");
  REQUIRE(f.ok());
  CHECK(f->rank == 6);  // the header line wins over the file name
  CHECK(f->tool == StackTool::kEuStack);
}

TEST_CASE("analyze stacks: malformed input names the file and problem", "[unit]") {
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"rank-0.txt", "", {"rank-0.txt: empty file"}},
      {"rank-0.txt", std::string("\0\0\x13\x37garbage\0", 12), {"rank-0.txt: binary data"}},
      {"rank-0.txt", "Segmentation fault (core dumped)\n", {"rank-0.txt: not a stack dump"}},
      {"stacks.txt", ReadFile(StackFixture("gdb_rank0.txt")), {"stacks.txt: cannot tell the rank"}},
      {"rank-9.txt", ReadFile(StackFixture("gdb_rank0.txt")), {"rank-9.txt: rank 9", "outside the layout"}},
      {"rank-0.txt", "PID 12 - process\nTID 12:\n#0  zzz\n", {"rank-0.txt:3:"}},
  };
  for (const Case& c : cases) {
    INFO(c.name << " " << c.expected[0]);
    TempDir dir;
    WriteFile(dir.Path(c.name), c.text);
    analyze_test::Result r = Analyze(Args(dir.path(), kLayout1x2x2, false));
    INFO(r.err);
    CHECK(r.code == 1);
    for (const std::string& e : c.expected) CHECK(r.err.find(e) != std::string::npos);
  }
  TempDir empty;
  analyze_test::Result none = Analyze(Args(empty.path(), kLayout1x2x2, false));
  CHECK(none.code == 1);
  CHECK(none.err.find("no stack files") != std::string::npos);
  CHECK(Analyze(Args(empty.Path("nope"), kLayout1x2x2, false)).code == 1);
  CHECK(Analyze({"stacks", empty.path(), "--tp", "2"}).code == 2);  // --pp, --dp, ... missing
  CHECK(Analyze({"stacks", empty.path(), "--tp", "0", "--pp", "1", "--dp", "1", "--gpus-per-machine", "1"}).code == 2);
  CHECK(Analyze({"stacks", empty.path(), "--tp", "1", "--pp", "1", "--dp", "3", "--gpus-per-machine", "2"}).code == 2);
}

TEST_CASE("peregrinectl analyze: dispatch and help", "[unit]") {
  std::ostringstream out, err;
  CHECK(RunPeregrinectl({"analyze", "--help"}, out, err) == 0);
  CHECK(out.str().find("stacks: one stack dump per rank") != std::string::npos);
  CHECK(out.str().find("rank-3.txt") != std::string::npos);
  std::ostringstream out2, err2;
  CHECK(RunPeregrinectl({"analyze", "sideways"}, out2, err2) == 2);
  CHECK(err2.str().find("unknown analysis 'sideways'") != std::string::npos);
  std::ostringstream out3, err3;
  CHECK(RunPeregrinectl({"--help"}, out3, err3) == 0);
  CHECK(out3.str().find("analyze steps FILE") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
