// peregrinectl analyze nccl: the three input formats (fixtures described in
// testdata/README.md), rank selection, and malformed input.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/analyze/nccl_trace.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using analyze_test::Fixture;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// The fixtures' iteration: 7 calls, the first an AllGather on the TP communicator.
void CheckPattern(const nlohmann::json& stream) {
  CHECK(stream["period"] == 7);
  CHECK(stream["periodAcf"].get<double>() > 0.95);
  REQUIRE(stream["pattern"].size() == 7);
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0;
  for (const auto& p : stream["pattern"]) {
    const std::string s = p.get<std::string>();
    all_gathers += s.rfind("AllGather", 0) == 0;
    reduce_scatters += s.rfind("ReduceScatter", 0) == 0;
    all_reduces += s.rfind("AllReduce", 0) == 0;
  }
  CHECK(all_gathers == 3);
  CHECK(reduce_scatters == 3);
  CHECK(all_reduces == 1);
}

// 64 iterations of ~250 ms, 30% slower from iteration 40.
void CheckSlowdown(const nlohmann::json& stream, double tolerance_steps) {
  INFO(stream.dump(1));
  CHECK(stream["stats"]["count"].get<int>() >= 55);
  CHECK(stream["stats"]["median"].get<double>() == Approx(250).margin(12));
  const auto& episodes = stream["changes"]["slowdowns"];
  REQUIRE(episodes.size() == 1);
  CHECK(std::abs(episodes[0]["onsetStep"].get<double>() - 40) <= tolerance_steps);
  CHECK(episodes[0]["severity"].get<double>() == Approx(0.30).margin(0.04));
  CHECK(episodes[0]["endStep"].is_null());
}

TEST_CASE("analyze nccl: NCCL_DEBUG=INFO log with timestamps, two ranks", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("nccl_debug_timestamps.log"), "--json"}).Json();
  CHECK(j["format"] == "nccl-debug-log");
  REQUIRE(j["streams"].size() == 2);
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& s = j["streams"][r];
    CHECK(s["rank"] == r);
    CHECK(s["label"].get<std::string>().find(r == 0 ? "node-a:48213" : "node-b:51877") != std::string::npos);
    CHECK(s["calls"] == 3 + 64 * 7);
    CHECK(s["iterationSource"] == "NCCL call timestamps");
    CheckPattern(s);
    // The tracker's first sample may start an iteration late (warm-up, anchor rotation).
    CheckSlowdown(s, 4);
  }
  // The program output interleaved with NCCL's lines was skipped, and said so.
  bool skipped_note = false;
  for (const auto& n : j["notes"]) skipped_note |= n.get<std::string>().find("non-NCCL lines skipped") != std::string::npos;
  CHECK(skipped_note);

  const nlohmann::json one = Analyze({"nccl", Fixture("nccl_debug_timestamps.log"), "--rank", "1", "--json"}).Json();
  REQUIRE(one["streams"].size() == 1);
  CHECK(one["streams"][0]["rank"] == 1);

  analyze_test::Result absent = Analyze({"nccl", Fixture("nccl_debug_timestamps.log"), "--rank", "5"});
  CHECK(absent.code == 1);
  CHECK(absent.err.find("no calls of rank 5") != std::string::npos);
  CHECK(absent.err.find("ranks present: 0, 1") != std::string::npos);

  analyze_test::Result text = Analyze({"nccl", Fixture("nccl_debug_timestamps.log"), "--rank", "0"});
  REQUIRE(text.code == 0);
  CHECK(text.out.find("period: 7 calls per iteration") != std::string::npos);
  CHECK(text.out.find("iteration time: SLOWDOWN from step") != std::string::npos);
}

TEST_CASE("analyze nccl: a year beyond int64 nanoseconds or a JSON number out of range is an error, not a crash (fuzz findings)", "[unit]") {
  // A timestamp in 4050 does not fit int64 nanoseconds since 1970: the line's time is not
  // recognised (the multiplication overflowed before).
  const std::string far_future =
      "[4050-03-14 09:26:53.004137] node-a:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 "
      "count 1024 datatype 7 op 0 root 0 comm 0x55d0 [nranks=2] stream 0x1\n";
  (void)ParseNcclTrace(far_future, "far.log");  // must return, whatever it decides
  // A JSON-lines record with a number too large for any type is a line error (it threw an
  // exception nothing caught, ending peregrinectl).
  absl::StatusOr<NcclTrace> huge = ParseNcclTrace(
      "{\"op\":\"Broadcast\",\"comm\":\"0x55\",\"count\":17419444134639e8738,\"rank\":0}\n", "huge.jsonl");
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(std::string(huge.status().message()), Catch::Contains("huge.jsonl:1"));
}

TEST_CASE("analyze nccl: NCCL_DEBUG log without timestamps reports period and structure only", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("nccl_debug_no_timestamps.log"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  CheckPattern(s);
  CHECK(s["iterationSource"] == "none");
  CHECK(s["iterationMs"].empty());
  bool told = false;
  for (const auto& n : s["notes"]) told |= n.get<std::string>().find("iteration times need timestamps") != std::string::npos;
  CHECK(told);
  analyze_test::Result text = Analyze({"nccl", Fixture("nccl_debug_no_timestamps.log")});
  REQUIRE(text.code == 0);
  CHECK(text.out.find("iteration times: not available") != std::string::npos);
  CHECK(text.out.find("NCCL_DEBUG_TIMESTAMP_FORMAT") != std::string::npos);
  // Without a rank in the log, --rank numbers the streams in order.
  CHECK(Analyze({"nccl", Fixture("nccl_debug_no_timestamps.log"), "--rank", "0"}).code == 0);
  CHECK(Analyze({"nccl", Fixture("nccl_debug_no_timestamps.log"), "--rank", "1"}).code == 1);
}

TEST_CASE("analyze nccl: coarse timestamps are used, with a warning", "[unit]") {
  // "[%F %T]" (NCCL's default format) has 1 s resolution.
  TempDir dir;
  std::string log;
  for (int it = 0; it < 20; ++it) {
    for (int k = 0; k < 3; ++k) {
      absl::StrAppendFormat(&log,
                            "[2025-03-14 09:%02d:%02d] h:7:7 [0] NCCL INFO %s: opCount %x sendbuff 0x1 "
                            "recvbuff 0x2 count %d datatype 7 op 0 root 0 comm 0xabc [nranks=8] stream 0x3\n",
                            (it * 2) / 60, (it * 2) % 60, k == 2 ? "AllReduce" : "AllGather", it * 3 + k,
                            1024 << k);
    }
  }
  WriteFile(dir.Path("coarse.log"), log);
  const nlohmann::json j = Analyze({"nccl", dir.Path("coarse.log"), "--json"}).Json();
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["period"] == 3);
  CHECK(s["stats"]["median"].get<double>() == Approx(2000.0));
  bool warned = false;
  for (const auto& n : s["notes"]) warned |= n.get<std::string>().find("1 s resolution") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("analyze nccl: Peregrine JSON-lines ring dump", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("ring_dump.jsonl"), "--json"}).Json();
  CHECK(j["format"] == "peregrine-jsonl");
  REQUIRE(j["streams"].size() == 2);
  for (int r = 0; r < 2; ++r) {
    CHECK(j["streams"][r]["label"] == absl::StrCat("rank ", r));
    CheckPattern(j["streams"][r]);
    CheckSlowdown(j["streams"][r], 4);
  }
}

TEST_CASE("analyze nccl: PyTorch profiler trace with ProfilerStep annotations", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("kineto_profiler_steps.json"), "--json"}).Json();
  CHECK(j["format"] == "kineto-trace");
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["rank"] == 0);
  CHECK(s["calls"] == 12 * 7);  // nccl:* CPU ops; record_param_comms and kernels not double counted
  CHECK(s["iterationSource"] == "ProfilerStep annotations");
  CHECK(s["iterationSteps"].front() == 2);
  CHECK(s["iterationSteps"].back() == 13);
  CHECK(s["stats"]["count"] == 12);
  CHECK(s["stats"]["median"].get<double>() == Approx(250).margin(10));
  CHECK(s["callsPerProfilerStep"].get<double>() == 7);
  CHECK(s["period"] == 7);
}

TEST_CASE("analyze nccl: PyTorch profiler trace with NCCL kernels only", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Fixture("kineto_kernels_only.json"), "--json"}).Json();
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["calls"] == 64 * 7);
  CHECK(s["iterationSource"] == "NCCL call timestamps");
  CheckPattern(s);
  CheckSlowdown(s, 4);
  bool kernels = false;
  for (const auto& n : j["notes"]) kernels |= n.get<std::string>().find("NCCL GPU kernels") != std::string::npos;
  CHECK(kernels);
}

TEST_CASE("analyze nccl: op names across formats", "[unit]") {
  CHECK(NcclOpFromName("AllReduce") == NcclOp::kAllReduce);
  CHECK(NcclOpFromName("all_reduce") == NcclOp::kAllReduce);
  CHECK(NcclOpFromName("allreduce_coalesced") == NcclOp::kAllReduce);
  CHECK(NcclOpFromName("_allgather_base") == NcclOp::kAllGather);
  CHECK(NcclOpFromName("all_gather_into_tensor") == NcclOp::kAllGather);
  CHECK(NcclOpFromName("_reduce_scatter_base") == NcclOp::kReduceScatter);
  CHECK(NcclOpFromName("ReduceScatter") == NcclOp::kReduceScatter);
  CHECK(NcclOpFromName("Reduce") == NcclOp::kReduce);
  CHECK(NcclOpFromName("Broadcast") == NcclOp::kBroadcast);
  CHECK(NcclOpFromName("all_to_all") == NcclOp::kAllToAll);
  CHECK(NcclOpFromName("Send") == NcclOp::kSend);
  CHECK(NcclOpFromName("Recv") == NcclOp::kRecv);
  CHECK(NcclOpFromName("SendRecv") == NcclOp::kOther);
  CHECK(NcclOpFromName("barrier") == NcclOp::kOther);
}

TEST_CASE("analyze nccl: malformed input names the file, line and problem", "[unit]") {
  TempDir dir;
  const std::string kineto = ReadFile(Fixture("kineto_profiler_steps.json"));
  auto log_line = [](const std::string& count) {
    return absl::StrCat("h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count ", count,
                        " datatype 7 op 0 root 0 comm 0xabc [nranks=2] stream 0x3\n");
  };
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"empty.log", "", {"empty.log: empty file"}},
      {"junk.bin", std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03\xed\x5d", 12) + std::string(200, '\x01'),
       {"junk.bin", "corrupt gzip data"}},
      {"truncated.json", kineto.substr(0, kineto.size() / 2),
       {"truncated.json:", "invalid JSON"}},
      {"notrace.json", "{\"schemaVersion\": 1,\n \"events\": []}\n", {"notrace.json", "traceEvents"}},
      {"noevents.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1, \"dur\": 2}]}",
       {"noevents.json", "neither NCCL events"}},
      {"badts.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"nccl:all_reduce\", \"ts\": \"soon\"}]}",
       {"badts.json", "traceEvents[0]", "\"ts\""}},
      {"badstep.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"ProfilerStep#x\", \"ts\": 1, \"dur\": 2}]}",
       {"badstep.json", "traceEvents[0]", "step name without a number"}},
      {"field.jsonl",
       "{\"op\":\"AllReduce\",\"comm\":\"0x1\",\"count\":4,\"datatype\":7,\"time_ns\":1}\n"
       "{\"op\":\"AllReduce\",\"comm\":\"0x1\",\"datatype\":7,\"time_ns\":2}\n",
       {"field.jsonl:2:", "missing field 'count'"}},
      {"cut.jsonl",
       "{\"op\":\"AllReduce\",\"comm\":\"0x1\",\"count\":4,\"datatype\":7,\"time_ns\":1}\n"
       "{\"op\":\"AllReduce\",\"comm\":\"0x1\",\"count\":4,\"datat\n",
       {"cut.jsonl:2:", "not a JSON object"}},
      {"time.jsonl",
       "{\"op\":\"AllReduce\",\"comm\":\"0x1\",\"count\":4,\"datatype\":7,\"time_ns\":\"noon\"}\n",
       {"time.jsonl:1:", "'time_ns' must be a number"}},
      {"count.log", absl::StrCat("launcher: starting\n", log_line("many")),
       {"count.log:2:", "numeric 'count'"}},
      {"stamp.log", absl::StrCat("[yesterday] ", log_line("4")),
       {"stamp.log:1:", "unrecognised timestamp '[yesterday]'"}},
      {"nocoll.log", "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n",
       {"nocoll.log", "no NCCL collective lines", "NCCL_DEBUG_SUBSYS=COLL"}},
      {"prose.txt", "\n\nthe job was slow on Tuesday\n", {"prose.txt:3:", "not a recognised NCCL call format"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    WriteFile(dir.Path(c.name), c.text);
    analyze_test::Result r = Analyze({"nccl", dir.Path(c.name)});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    for (const std::string& e : c.expected) CHECK(r.err.find(e) != std::string::npos);
  }
  CHECK(Analyze({"nccl", Fixture("ring_dump.jsonl"), "--rank", "x"}).code == 2);
  CHECK(Analyze({"nccl"}).code == 2);
}

TEST_CASE("analyze nccl: a real Kineto trace counts each NCCL op once (GPU-annotation copies dropped) with record_param_comms args", "[unit]") {
  // HolisticTraceAnalysis' tests/data/nccl_parser_config/nccl_data.json.gz, trimmed (README):
  // 21 nccl:* CPU ops and their 21 gpu_user_annotation copies, 3 ProfilerSteps of 7 calls.
  const nlohmann::json j = Analyze({"nccl", Fixture("kineto_hta_nccl_rank0.json.gz"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  INFO(j.dump(1));
  CHECK(s["rank"] == 0);
  CHECK(s["calls"] == 21);
  CHECK(s["period"] == 7);
  CHECK(s["callsPerProfilerStep"] == 7);
  // Counts and dtypes from record_param_comms (the nccl:* ops carry none): 7 signatures.
  CHECK(s["distinctSignatures"] == 7);
  CHECK(s["pattern"][2] == "AllReduce comm=0x0 count=2049000 dtype=7");
  bool copies_noted = false;
  for (const auto& n : j["notes"]) copies_noted |= n.get<std::string>().find("21 GPU-annotation copies") != std::string::npos;
  CHECK(copies_noted);
}

TEST_CASE("analyze nccl: Kineto ops without args take them from their kernels - a trace of GPU annotations alone is read", "[unit]") {
  auto event = [](const std::string& name, const std::string& cat, double ts, nlohmann::json args) {
    return nlohmann::json{{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", 5.0},
                          {"args", std::move(args)}};
  };
  nlohmann::json events = nlohmann::json::array();
  for (int i = 0; i < 12; ++i) {
    const bool gather = i % 3 == 2;
    const double t = 1000.0 * i;
    events.push_back(event(gather ? "nccl:_all_gather_base" : "nccl:all_reduce", "user_annotation", t, nlohmann::json::object()));
    events.push_back(event(gather ? "nccl:_all_gather_base" : "nccl:all_reduce", "gpu_user_annotation", t + 50, nlohmann::json::object()));
    events.push_back(event(gather ? "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)" : "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                           "kernel", t + 60,
                           {{"Collective name", gather ? "_allgather_base" : "allreduce"},
                            {"In msg nelems", gather ? 4096 : 1024 + (i % 3)},
                            {"dtype", "BFloat16"},
                            {"Group size", 2},
                            {"Process Group Name", "3"}}));
  }
  TempDir dir;
  WriteFile(dir.Path("k.json"), nlohmann::json{{"traceEvents", events}}.dump());
  nlohmann::json j = Analyze({"nccl", dir.Path("k.json"), "--json"}).Json();
  INFO(j.dump(1));
  CHECK(j["streams"][0]["calls"] == 12);
  CHECK(j["streams"][0]["period"] == 3);
  CHECK(j["streams"][0]["pattern"][0] == "AllReduce comm=0x3 count=1024 dtype=9");
  CHECK(j["streams"][0]["pattern"][2] == "AllGather comm=0x3 count=4096 dtype=9");
  // Without the CPU ops: the annotation copies are the calls (once each).
  nlohmann::json gpu_only = nlohmann::json::array();
  for (const auto& e : events) {
    if (e["cat"] != "user_annotation") gpu_only.push_back(e);
  }
  WriteFile(dir.Path("g.json"), nlohmann::json{{"traceEvents", gpu_only}}.dump());
  j = Analyze({"nccl", dir.Path("g.json"), "--json"}).Json();
  CHECK(j["streams"][0]["calls"] == 12);
  CHECK(j["streams"][0]["period"] == 3);
}

TEST_CASE("analyze nccl: NCCL_DEBUG lines behind Ray, torchrun and Slurm prefixes - cudaDev separates streams", "[unit]") {
  // Ray: lines quoted from a public issue (README); 3 processes on 3 hosts.
  nlohmann::json j = Analyze({"nccl", Fixture("nccl_debug_ray_prefix.log"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 3);
  CHECK(j["streams"][1]["label"] == "r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-srrss:22754 [5]");
  CHECK(j["streams"][1]["calls"] == 2);
  CHECK(j["desync"]["found"] == false);
  CHECK(j["desync"]["classes"][0]["alignedBy"] == "opCount");
  // One process driving two GPUs (cudaDev 0 and 1): two streams.
  j = Analyze({"nccl", Fixture("nccl_debug_two_devices.log"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 2);
  CHECK(j["streams"][0]["calls"] == 3);
  CHECK(j["streams"][1]["calls"] == 4);
  // torchrun (--tee 3 / --log-dir) and srun --label prefixes, built on the fixture's lines.
  const std::string base = ReadFile(Fixture("nccl_debug_timestamps.log"));
  for (const std::string kind : {"rank", "default", "slurm"}) {
    INFO(kind);
    std::string text;
    for (absl::string_view line : absl::StrSplit(base, '\n')) {
      if (line.empty()) continue;
      const int r = absl::StrContains(line, "node-a:") ? 0 : 1;
      const int shown = r + 6;  // a global rank that only the prefix gives
      text += kind == "slurm" ? absl::StrCat(shown, ": ", line, "\n") : absl::StrCat("[", kind, shown, "]:", line, "\n");
    }
    TempDir dir;
    WriteFile(dir.Path("p.log"), text);
    j = Analyze({"nccl", dir.Path("p.log"), "--json"}).Json();
    REQUIRE(j["streams"].size() == 2);
    for (int r = 0; r < 2; ++r) {
      if (kind == "default") {
        CHECK(j["streams"][r]["rank"] == r);  // the local rank is not a rank: NCCL's Init line gives it
        CHECK(j["streams"][r]["label"].get<std::string>().rfind("rank ", 0) == 0);
      } else {
        CHECK(j["streams"][r]["rank"] == r + 6);
      }
      CheckPattern(j["streams"][r]);
      CheckSlowdown(j["streams"][r], 2);
    }
  }
}

TEST_CASE("analyze nccl: interleaved terminal output and partly bad call lines yield what can be read, counted", "[unit]") {
  // Real interleaving quoted from a public issue: one line holds two prefixes, one call line
  // lost its prefix. The call after the last "NCCL INFO" is read; the orphan is skipped.
  nlohmann::json j = Analyze({"nccl", Fixture("nccl_debug_interleaved.log"), "--json"}).Json();
  REQUIRE(j["streams"].size() == 4);
  CHECK(j["streams"][0]["label"] == "learnfair062:32629 [7]");
  CHECK(j["desync"]["found"] == true);  // what the excerpt shows: cudaDev 0's opCount 0 is the big broadcast
  // Bad call lines among good ones: skipped, counted, the first named.
  std::string text = ReadFile(Fixture("nccl_debug_no_timestamps.log"));
  const std::string bad = "node-a:1:1 [0] NCCL INFO AllReduce: opCount 5 sendbuff 0x1 recvbuff 0x1 count lots datatype 7\n";
  const size_t cut = text.find('\n', text.size() / 2) + 1;
  text = text.substr(0, cut) + bad + bad + text.substr(cut);
  TempDir dir;
  WriteFile(dir.Path("partly.log"), text);
  const analyze_test::Result r = Analyze({"nccl", dir.Path("partly.log"), "--json"});
  REQUIRE(r.code == 0);
  CHECK(r.err.find("warning: 2 unreadable") != std::string::npos);
  j = nlohmann::json::parse(r.out);
  bool named = false;
  for (const auto& n : j["notes"]) {
    named |= n.get<std::string>().find("2 unreadable NCCL call line(s) skipped; the first: " + dir.Path("partly.log") + ":") != std::string::npos;
  }
  CHECK(named);
  CHECK(j["streams"][0]["period"] == 7);
  // Mixed formats in one file: JSON lines after NCCL lines are not NCCL lines (skipped, counted).
  WriteFile(dir.Path("mixed.log"), ReadFile(Fixture("nccl_debug_no_timestamps.log")) + ReadFile(Fixture("ring_dump.jsonl")));
  j = Analyze({"nccl", dir.Path("mixed.log"), "--json"}).Json();
  CHECK(j["streams"][0]["period"] == 7);
  // opCount going back (a restarted process) is noted.
  WriteFile(dir.Path("reset.log"),
            "h:1:1 [0] NCCL INFO AllReduce: opCount 7 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x3\n"
            "h:1:1 [0] NCCL INFO AllReduce: opCount 2 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x3\n"
            "h:1:1 [0] NCCL INFO AllReduce: opCount 5 sendbuff 0x1 recvbuff 0x2 count 4 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x3\n");
  j = Analyze({"nccl", dir.Path("reset.log"), "--json"}).Json();
  std::string notes = j["notes"].dump();
  CHECK(notes.find("opCount went back 1 time(s)") != std::string::npos);
  CHECK(notes.find("2 opCount value(s) skipped") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
