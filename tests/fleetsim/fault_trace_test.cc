// Fault trace parsing: real-format samples, every refusal with its line and reason, the
// lenient reader on partly bad files, truncated and hostile input.
#include "fleetsim/fault_trace.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace peregrine::fleetsim {
namespace {

// The shape an operator exports from an incident log: a header, comments, CRLF line
// ends, fractional seconds, both node spellings, fail-stops and fail-slows.
constexpr char kSample[] =
    "node,start_s,end_s,kind,severity\r\n"
    "# Llama-3-style interruptions, seconds since the job's start\r\n"
    "m12,3600,262800,gpu\r\n"
    "3,7200.5,93600,memory,\r\n"
    "\r\n"
    "m7,10800,32400,nic\r\n"
    "0,10800,97200,host\r\n"
    "m12,14400,14400,software\r\n"
    "  5 , 1800 , 2400 , slow , 0.25 \r\n"
    "m6,900,2340,slow-link,0.39\r\n";

std::string Strict(const std::string& text, int machines = 16,
                   const FaultTraceOptions& options = {}) {
  absl::StatusOr<std::vector<FaultEvent>> parsed = ParseFaultTrace(text, machines, options);
  return parsed.ok() ? "ok" : std::string(parsed.status().message());
}

TEST_CASE("A real-format trace parses into sorted faults", "[unit]") {
  absl::StatusOr<std::vector<FaultEvent>> parsed = ParseFaultTrace(kSample, 16);
  REQUIRE(parsed.ok());
  const std::vector<FaultEvent>& f = *parsed;
  REQUIRE(f.size() == 7);
  CHECK(f[0].machine == 6);
  CHECK(f[0].kind == FaultKind::kSlowLink);
  CHECK(f[0].start_ns == 900'000'000'000);
  CHECK(f[0].end_ns == 2'340'000'000'000);
  CHECK(f[0].severity == Approx(0.39));
  CHECK(f[1].machine == 5);
  CHECK(f[1].kind == FaultKind::kSlowCompute);
  CHECK(f[1].severity == Approx(0.25));
  CHECK(f[2].machine == 12);
  CHECK(f[2].kind == FaultKind::kGpu);
  CHECK(f[2].end_ns == 262'800'000'000'000);
  CHECK(f[2].severity == 0);
  CHECK(f[3].machine == 3);
  CHECK(f[3].kind == FaultKind::kMemory);
  CHECK(f[3].start_ns == 7'200'500'000'000);
  // Ties at 10800 s are ordered by machine.
  CHECK(f[4].machine == 0);
  CHECK(f[4].kind == FaultKind::kHost);
  CHECK(f[5].machine == 7);
  CHECK(f[5].kind == FaultKind::kNic);
  CHECK(f[6].kind == FaultKind::kSoftware);
  CHECK(f[6].start_ns == f[6].end_ns);
}

TEST_CASE("Empty traces, header-only traces and comment-only traces give no faults", "[unit]") {
  for (const char* text : {"", "\n\n", "node,start_s,end_s,kind\n", "# nothing\n  \n",
                           "\xEF\xBB\xBFnode,start_s,end_s,kind,severity\r\n"}) {
    absl::StatusOr<std::vector<FaultEvent>> parsed = ParseFaultTrace(text, 4);
    REQUIRE(parsed.ok());
    CHECK(parsed->empty());
  }
  // A header is recognised only as the first data line.
  CHECK_THAT(Strict("0,1,2,gpu\nnode,start_s,end_s,kind\n"),
             Catch::Contains("line 2: unknown node \"node\""));
}

TEST_CASE("Bad lines are refused with the line number and the reason", "[unit]") {
  struct Case {
    std::string line;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"0,10,20,disk", "unknown kind \"disk\""},
      {"0,10,20,GPU", "unknown kind \"GPU\""},
      {"0,-5,20,gpu", "negative start_s"},
      {"0,30,20,gpu", "end_s 20 is before start_s 30 (negative duration)"},
      {"16,10,20,gpu", "unknown node \"16\" (want 0..15 or m0..m15)"},
      {"m99,10,20,gpu", "unknown node \"m99\""},
      {"-1,10,20,gpu", "unknown node \"-1\""},
      {"node7,10,20,gpu", "unknown node \"node7\""},
      {",10,20,gpu", "missing node"},
      {"0,ten,20,gpu", "start_s \"ten\" is not a decimal number"},
      {"0,10,2O,gpu", "end_s \"2O\" is not a decimal number"},
      {"0,nan,20,gpu", "start_s \"nan\" is not a decimal number"},
      {"0,10,inf,gpu", "end_s \"inf\" is not a decimal number"},
      {"0,0x10,20,gpu", "start_s \"0x10\" is not a decimal number"},
      {"0,10,1e400,gpu", "end_s \"1e400\" is not a decimal number"},
      {"0,10,20", "missing field kind"},
      {"0,10", "missing field end_s"},
      {"0", "missing field start_s"},
      {"0,10,,gpu", "missing end_s"},
      {"0,10,20,", "missing kind"},
      {"0,10,20,gpu,0.5,extra", "too many fields"},
      {"0,10,20,gpu,0.5", "severity given for fail-stop kind gpu"},
      {"0,10,20,slow", "missing severity (required for slow"},
      {"0,10,20,slow-link,", "missing severity (required for slow-link"},
      {"0,10,20,slow,0", "severity 0 is out of range"},
      {"0,10,20,slow,-0.3", "severity -0.3 is out of range"},
      {"0,10,20,slow,abc", "severity \"abc\" is not a decimal number"},
      {"0,10,10,slow,0.2", "empty slow episode"},
      {"0,10,4e9,gpu", "beyond 100 years"},
  };
  for (const Case& c : cases) {
    const std::string text = "node,start_s,end_s,kind,severity\n# ok so far\n1,0,5,gpu\n" +
                             c.line + "\n2,0,5,nic\n";
    const std::string message = Strict(text);
    INFO(c.line << " -> " << message);
    CHECK_THAT(message, Catch::StartsWith("fault trace line 4: "));
    CHECK_THAT(message, Catch::Contains(c.reason));
  }
}

TEST_CASE("The lenient reader keeps the good lines of a partly bad trace and counts the rest", "[unit]") {
  const std::string text =
      "node,start_s,end_s,kind,severity\n"
      "0,10,20,gpu\n"
      "1,10,20,disk\n"
      "2,30,20,nic\n"
      "3,5,50,slow,0.5\n"
      "99,1,2,host\n"
      "4,1,2,host\n";
  absl::StatusOr<FaultTraceRead> read = ReadFaultTrace(text, 8);
  REQUIRE(read.ok());
  CHECK(read->fault_lines == 3);
  CHECK(read->skipped_lines == 3);
  REQUIRE(read->errors.size() == 3);
  CHECK_THAT(read->errors[0], Catch::StartsWith("line 3: unknown kind"));
  CHECK_THAT(read->errors[1], Catch::StartsWith("line 4: end_s"));
  CHECK_THAT(read->errors[2], Catch::StartsWith("line 6: unknown node"));
  REQUIRE(read->faults.size() == 3);
  CHECK(read->faults[0].machine == 4);  // start 1 s
  CHECK(read->faults[1].machine == 3);  // start 5 s
  CHECK(read->faults[2].machine == 0);  // start 10 s
  // The strict parser refuses the same file at its first bad line.
  CHECK_THAT(Strict(text, 8), Catch::StartsWith("fault trace line 3: unknown kind \"disk\""));
}

TEST_CASE("The lenient reader keeps at most 20 error messages but counts every bad line", "[unit]") {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "0,1,2,bogus\n";
  text += "0,1,2,gpu\n";
  absl::StatusOr<FaultTraceRead> read = ReadFaultTrace(text, 1);
  REQUIRE(read.ok());
  CHECK(read->skipped_lines == 50);
  CHECK(read->errors.size() == 20);
  CHECK(read->faults.size() == 1);
}

TEST_CASE("Node names map onto machines by position and nothing else is accepted", "[unit]") {
  FaultTraceOptions options;
  options.node_names = {"gpu-node-a", "gpu-node-b", "gpu-node-c"};
  absl::StatusOr<std::vector<FaultEvent>> parsed =
      ParseFaultTrace("gpu-node-c,5,10,host\ngpu-node-a,1,2,gpu\n", 3, options);
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[0].machine == 0);
  CHECK((*parsed)[1].machine == 2);
  CHECK_THAT(Strict("1,1,2,gpu\n", 3, options),
             Catch::Contains("line 1: unknown node \"1\" (not one of the job's 3 machine names)"));
  CHECK_THAT(Strict("gpu-node-d,1,2,gpu\n", 3, options), Catch::Contains("unknown node"));

  FaultTraceOptions wrong_size;
  wrong_size.node_names = {"a", "b"};
  CHECK_THAT(Strict("a,1,2,gpu\n", 3, wrong_size), Catch::Contains("2 node names for 3 machines"));
  FaultTraceOptions duplicate;
  duplicate.node_names = {"a", "b", "a"};
  CHECK_THAT(Strict("a,1,2,gpu\n", 3, duplicate), Catch::Contains("\"a\" is given twice"));
  FaultTraceOptions empty_name;
  empty_name.node_names = {"a", "", "c"};
  CHECK_THAT(Strict("a,1,2,gpu\n", 3, empty_name), Catch::Contains("node name 1"));
  CHECK_THAT(Strict("0,1,2,gpu\n", -1), Catch::Contains("machines = -1"));
  CHECK_THAT(Strict("0,1,2,gpu\n", 0), Catch::Contains("unknown node \"0\""));
}

TEST_CASE("Truncated traces fail at the cut line, or parse when cut at a line end", "[unit]") {
  const std::string full = "node,start_s,end_s,kind,severity\n0,10,20,gpu\n1,30,90,slow,0.4\n";
  CHECK(Strict(full.substr(0, full.size() - 1)) == "ok");  // no final newline
  CHECK_THAT(Strict(full.substr(0, full.find("slow") + 2)),
             Catch::Contains("line 3: unknown kind \"sl\""));
  CHECK_THAT(Strict(full.substr(0, full.find("slow,") + 5)),
             Catch::Contains("line 3: missing severity"));
  CHECK_THAT(Strict(full.substr(0, full.find("30,") + 2)),
             Catch::Contains("line 3: missing field end_s"));
  CHECK_THAT(Strict(full.substr(0, 40)), Catch::Contains("line 2: "));
}

TEST_CASE("Hostile input is refused cleanly with bounded, escaped messages", "[unit]") {
  const std::string huge(100000, 'x');
  const std::string message = Strict("0,1,2," + huge + "\n");
  CHECK_THAT(message, Catch::Contains("unknown kind \"xxxx"));
  CHECK(message.size() < 200);
  const std::string binary = std::string("0,1,2,g\0u\x01\xff", 11) + "\n";
  CHECK_THAT(Strict(binary), Catch::Contains("unknown kind \"g\\x00u\\x01\\xff\""));
  CHECK_THAT(Strict(",,,,,,,,,,,,,,,,,,,,,,,,,,,\n"), Catch::Contains("too many fields"));
  CHECK_THAT(Strict("999999999999999999999,1,2,gpu\n"), Catch::Contains("unknown node"));
  CHECK_THAT(Strict("0,1,2,\"gpu\"\n"), Catch::Contains("unknown kind \"\\x22gpu\\x22\""));
  // Mixed: a valid fault after garbage is still refused in strict mode, at the garbage.
  CHECK_THAT(Strict("\x7f\x7f\n0,1,2,gpu\n"), Catch::Contains("line 1: "));
}

}  // namespace
}  // namespace peregrine::fleetsim
