// ReadAnalysisInput / InflateGzip (cli/analyze/input_file.h): gzip by content for every
// analyze input, with truncated, corrupt and oversized streams.
#include "cli/analyze/input_file.h"

#include <zlib.h>

#include <string>

#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using analyze_test::Fixture;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// `text` as one gzip member (zlib's deflate with a gzip wrapper, as gzip(1) writes).
std::string Gzip(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST_CASE("input file: gzip is recognised by its magic and inflated, plain text passes through", "[unit]") {
  const std::string text = "worker,step,seconds\nw0,1,0.25\n";
  CHECK_FALSE(LooksLikeGzip(text));
  CHECK(LooksLikeGzip(Gzip(text)));
  absl::StatusOr<std::string> inflated = InflateGzip(Gzip(text), "t.gz");
  REQUIRE(inflated.ok());
  CHECK(*inflated == text);
  // Concatenated members (cat a.gz b.gz) are one stream, as gzip -d reads them.
  absl::StatusOr<std::string> two = InflateGzip(Gzip("a\n") + Gzip("b\n"), "two.gz");
  REQUIRE(two.ok());
  CHECK(*two == "a\nb\n");
  // The real HTA trace is a gzip file read as such.
  absl::StatusOr<std::string> hta = ReadAnalysisInput(Fixture("kineto_hta_nccl_rank0.json.gz"));
  REQUIRE(hta.ok());
  CHECK(hta->find("\"traceEvents\"") != std::string::npos);
  TempDir dir;
  WriteFile(dir.Path("plain.csv"), text);
  absl::StatusOr<std::string> plain = ReadAnalysisInput(dir.Path("plain.csv"));
  REQUIRE(plain.ok());
  CHECK(*plain == text);
}

TEST_CASE("input file: truncated, corrupt and oversized gzip are errors naming the file", "[unit]") {
  std::string big;
  for (int i = 0; i < 20000; ++i) big += "node-a:1:1 [0] NCCL INFO AllReduce: opCount " + std::to_string(i) + "\n";
  const std::string gz = Gzip(big);
  absl::StatusOr<std::string> cut = InflateGzip(gz.substr(0, gz.size() / 2), "cut.gz");
  REQUIRE_FALSE(cut.ok());
  CHECK_THAT(std::string(cut.status().message()), Catch::StartsWith("cut.gz: truncated gzip data"));
  // Only the trailer missing (CRC and length): still truncated, not silently accepted.
  absl::StatusOr<std::string> no_trailer = InflateGzip(gz.substr(0, gz.size() - 4), "trailer.gz");
  REQUIRE_FALSE(no_trailer.ok());
  CHECK_THAT(std::string(no_trailer.status().message()), Catch::Contains("truncated"));
  std::string corrupt = gz;
  for (size_t i = 20; i < 60; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  absl::StatusOr<std::string> bad = InflateGzip(corrupt, "bad.gz");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("bad.gz: corrupt gzip data"));
  // A CRC mismatch (a flipped byte of the trailer) is corruption too.
  std::string crc = gz;
  crc[crc.size() - 6] = static_cast<char>(crc[crc.size() - 6] ^ 1);
  absl::StatusOr<std::string> crc_bad = InflateGzip(crc, "crc.gz");
  REQUIRE_FALSE(crc_bad.ok());
  CHECK_THAT(std::string(crc_bad.status().message()), Catch::Contains("crc.gz: corrupt gzip data"));
  // A bomb stops at the cap.
  absl::StatusOr<std::string> capped = InflateGzip(Gzip(std::string(1 << 20, 'x')), "bomb.gz", 4096);
  REQUIRE_FALSE(capped.ok());
  CHECK_THAT(std::string(capped.status().message()), Catch::Contains("bomb.gz: gzip data inflates to more than 4096"));
  TempDir dir;
  WriteFile(dir.Path("big.log"), big);
  absl::StatusOr<std::string> too_big = ReadAnalysisInput(dir.Path("big.log"), 1000);
  REQUIRE_FALSE(too_big.ok());
  CHECK_THAT(std::string(too_big.status().message()), Catch::Contains("larger than 1000 bytes"));
  CHECK(ReadAnalysisInput(dir.Path("missing")).status().code() == absl::StatusCode::kNotFound);
  CHECK(ReadAnalysisInput(dir.Path("")).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("input file: every analysis reads gzip: steps, nccl and a truncated .gz names the file", "[unit]") {
  TempDir dir;
  WriteFile(dir.Path("log.gz"), Gzip(ReadFile(Fixture("nccl_debug_timestamps.log"))));
  const nlohmann::json j = Analyze({"nccl", dir.Path("log.gz"), "--json"}).Json();
  CHECK(j["format"] == "nccl-debug-log");
  CHECK(j["streams"].size() == 2);
  // The name does not matter, the content does.
  WriteFile(dir.Path("trace.json"), Gzip(ReadFile(Fixture("kineto_profiler_steps.json"))));
  CHECK(Analyze({"nccl", dir.Path("trace.json"), "--json"}).Json()["format"] == "kineto-trace");
  std::string csv = "worker,step,seconds\n";
  for (int s = 0; s < 40; ++s) {
    for (int w = 0; w < 3; ++w) csv += "w" + std::to_string(w) + "," + std::to_string(s) + ",0.25\n";
  }
  WriteFile(dir.Path("steps.csv.gz"), Gzip(csv));
  analyze_test::Result steps = Analyze({"steps", dir.Path("steps.csv.gz"), "--json"});
  INFO(steps.err);
  CHECK(steps.code == 0);
  const std::string gz = Gzip(ReadFile(Fixture("nccl_debug_timestamps.log")));
  WriteFile(dir.Path("cut.log.gz"), gz.substr(0, gz.size() / 3));
  analyze_test::Result cut = Analyze({"nccl", dir.Path("cut.log.gz")});
  CHECK(cut.code == 1);
  CHECK(cut.err.find(dir.Path("cut.log.gz") + ": truncated gzip data") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
