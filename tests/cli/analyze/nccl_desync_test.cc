// FindNcclDesync (cli/analyze/nccl_desync.h) on constructed streams, and `analyze nccl`
// over several ranks' files, including a real rank desync quoted from a public issue.
#include "cli/analyze/nccl_desync.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using analyze_test::Fixture;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

struct Call {
  NcclOp op;
  uint64_t count;
  int32_t datatype = 7;
  int64_t op_count = -1;
  int nranks = 4;
  uint64_t comm = 0x55;
};

NcclCallStream Stream(int rank, const std::vector<Call>& calls) {
  NcclCallStream s;
  s.rank = rank;
  s.label = absl::StrCat("rank ", rank);
  for (const Call& c : calls) {
    NcclCallRecord r;
    r.op = c.op;
    r.count = c.count;
    r.datatype = c.datatype;
    r.comm_id = c.comm;
    s.calls.push_back(r);
    NcclCallDetail d;
    d.op_count = c.op_count;
    d.nranks = c.nranks;
    s.details.push_back(d);
  }
  return s;
}

constexpr NcclOp kAR = NcclOp::kAllReduce;
constexpr NcclOp kAG = NcclOp::kAllGather;

TEST_CASE("nccl desync: one rank calls AllGather where its peers call AllReduce, aligned by opCount", "[unit]") {
  std::vector<NcclCallStream> streams;
  for (int r = 0; r < 4; ++r) {
    // Rank 3's log starts later (an excerpt): opCount still aligns it.
    std::vector<Call> calls;
    for (int64_t oc = r == 3 ? 5 : 0; oc < 10; ++oc) {
      const bool wrong = r == 2 && oc == 7;
      calls.push_back({wrong ? kAG : kAR, wrong ? 4096u : 1024u, 7, oc});
    }
    streams.push_back(Stream(r, calls));
  }
  const NcclDesyncReport report = FindNcclDesync(streams);
  REQUIRE(report.classes.size() == 1);
  const NcclDesyncClass& c = report.classes[0];
  CHECK(report.any_desync);
  CHECK(c.aligned_by == "opCount");
  CHECK(c.position == 7);
  REQUIRE(c.sides.size() == 2);
  CHECK(c.sides[0].ranks == std::vector<int>{0, 1, 3});
  CHECK(c.sides[0].call == "AllReduce count=1024 dtype=7 nranks=4");
  CHECK(c.sides[1].ranks == std::vector<int>{2});
  CHECK(c.sides[1].call == "AllGather count=4096 dtype=7 nranks=4");
  CHECK(c.behind.empty());
}

TEST_CASE("nccl desync: without opCount the call index aligns - a count or datatype mismatch is a desync too", "[unit]") {
  std::vector<NcclCallStream> streams = {Stream(0, {{kAR, 8}, {kAR, 16}, {kAR, 32}}),
                                         Stream(1, {{kAR, 8}, {kAR, 16, 6}, {kAR, 32}})};
  NcclDesyncReport report = FindNcclDesync(streams);
  REQUIRE(report.classes.size() == 1);
  CHECK(report.classes[0].aligned_by == "call index");
  CHECK(report.classes[0].position == 1);
  streams[1] = Stream(1, {{kAR, 8}, {kAR, 16}, {kAR, 33}});
  report = FindNcclDesync(streams);
  CHECK(report.classes[0].position == 2);
  // Agreement: no desync, and a rank that stops early is behind, not desynchronised.
  streams[1] = Stream(1, {{kAR, 8}, {kAR, 16}});
  report = FindNcclDesync(streams);
  CHECK_FALSE(report.any_desync);
  REQUIRE(report.classes[0].behind.size() == 1);
  CHECK(report.classes[0].behind[0].rank == 1);
  CHECK(report.classes[0].behind[0].last_position == 1);
  CHECK(report.classes[0].behind[0].peers_last == 2);
  // A single stream has nothing to compare.
  CHECK(FindNcclDesync({streams[0]}).classes.empty());
}

TEST_CASE("nccl desync: communicators of different sizes are compared apart (TP and DP collectives)", "[unit]") {
  // Ranks 0 and 1 share a TP pair (nranks 2) and all four a DP group (nranks 4); the TP calls
  // of ranks 2 and 3 are their own pair's. Interleavings differ per rank: no desync.
  std::vector<NcclCallStream> streams = {
      Stream(0, {{kAG, 10, 7, -1, 2}, {kAR, 99, 7, -1, 4}, {kAG, 10, 7, -1, 2}}),
      Stream(1, {{kAG, 10, 7, -1, 2}, {kAG, 10, 7, -1, 2}, {kAR, 99, 7, -1, 4}}),
      Stream(2, {{kAR, 99, 7, -1, 4}, {kAG, 10, 7, -1, 2}, {kAG, 10, 7, -1, 2}}),
      Stream(3, {{kAG, 10, 7, -1, 2}, {kAG, 10, 7, -1, 2}, {kAR, 99, 7, -1, 4}})};
  NcclDesyncReport report = FindNcclDesync(streams);
  CHECK_FALSE(report.any_desync);
  REQUIRE(report.classes.size() == 2);
  // One index comparison over all four would have reported call #0 (AllGather vs AllReduce).
  streams[3].calls[2].count = 98;
  report = FindNcclDesync(streams);
  CHECK(report.any_desync);
  for (const NcclDesyncClass& c : report.classes) {
    CHECK(c.desync == (c.group == "communicators of 4 ranks"));
  }
}

TEST_CASE("nccl desync: with global communicator names the communicator is part of the call", "[unit]") {
  std::vector<NcclCallStream> streams = {Stream(0, {{kAR, 8, 7, 1, 2, 0xa}, {kAR, 8, 7, 2, 2, 0xa}}),
                                         Stream(1, {{kAR, 8, 7, 1, 2, 0xa}, {kAR, 8, 7, 2, 2, 0xa}})};
  for (NcclCallStream& s : streams) s.global_comm_ids = true;
  NcclDesyncReport report = FindNcclDesync(streams);
  REQUIRE(report.classes.size() == 1);
  CHECK(report.classes[0].group == "communicator 0xa");
  CHECK_FALSE(report.any_desync);
  CHECK(report.classes[0].compared_calls == 2);
}

TEST_CASE("analyze nccl: a real rank desync (rank 2 calls AllGather, its peers AllReduce) is reported", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("nccl_debug_desync_rccl.log"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 2);
  const nlohmann::json& d = j["desync"];
  CHECK(d["found"] == true);
  REQUIRE(d["classes"].size() == 1);
  const nlohmann::json& c = d["classes"][0];
  CHECK(c["alignedBy"] == "opCount");
  CHECK(c["position"] == 0x28c);
  REQUIRE(c["sides"].size() == 2);
  std::vector<std::string> calls = {c["sides"][0]["call"], c["sides"][1]["call"]};
  std::sort(calls.begin(), calls.end());
  CHECK(calls[0] == "AllGather count=59205120 dtype=0 nranks=4");
  CHECK(calls[1] == "AllReduce count=9984512 dtype=7 nranks=4");
  const analyze_test::Result text = Analyze({"nccl", Fixture("nccl_debug_desync_rccl.log")});
  CHECK(text.code == 0);
  CHECK(text.out.find("DESYNC at opCount 0x28c") != std::string::npos);
  CHECK(text.out.find("h03r3n06:45012 [2]") != std::string::npos);
}

TEST_CASE("analyze nccl: several files or a directory, one per rank, are compared across ranks", "[unit]") {
  TempDir dir;
  // Two ranks' Kineto traces: the real rank-0 trace and a rank-1 copy whose 10th call is an
  // AllGather (what a rank taking another code path would record).
  nlohmann::json rank0 = nlohmann::json::parse(ReadFile(Fixture("kineto_profiler_steps.json")));
  nlohmann::json rank1 = rank0;
  rank1["distributedInfo"]["rank"] = 1;
  std::filesystem::create_directories(dir.Path("ranks"));
  std::filesystem::create_directories(dir.Path("empty"));
  WriteFile(dir.Path("ranks/rank0.json"), rank0.dump());
  WriteFile(dir.Path("ranks/rank1.json"), rank1.dump());
  nlohmann::json j = Analyze({"nccl", dir.Path("ranks"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 2);
  CHECK(j["streams"][0]["rank"] == 0);
  CHECK(j["streams"][1]["rank"] == 1);
  CHECK(j["desync"]["found"] == false);
  int changed = 0;
  for (auto& ev : rank1["traceEvents"]) {
    if (ev.value("name", "") == "nccl:all_reduce" && changed++ == 9) {
      ev["name"] = "nccl:all_gather";
      ev["args"]["Collective name"] = "allgather";
    }
  }
  REQUIRE(changed > 10);
  WriteFile(dir.Path("rank1_bad.json"), rank1.dump());
  j = Analyze({"nccl", dir.Path("ranks/rank0.json"), dir.Path("rank1_bad.json"), "--json"}).Json();
  CHECK(j["desync"]["found"] == true);
  const nlohmann::json& c = j["desync"]["classes"][0];
  REQUIRE(c["sides"].size() == 2);
  CHECK((c["sides"][0]["ranks"] == std::vector<int>{0} || c["sides"][0]["ranks"] == std::vector<int>{1}));
  // --rank keeps one stream and compares nothing.
  j = Analyze({"nccl", dir.Path("ranks"), "--rank", "1", "--json"}).Json();
  CHECK(j["streams"].size() == 1);
  CHECK_FALSE(j.contains("desync"));
  // An empty directory and a missing file are input errors.
  WriteFile(dir.Path("empty/.hidden"), "x");
  CHECK(Analyze({"nccl", dir.Path("empty")}).code == 1);
  CHECK(Analyze({"nccl", dir.Path("ranks"), dir.Path("nope.json")}).code == 1);
}

}  // namespace
}  // namespace peregrine
