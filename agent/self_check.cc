#include "agent/self_check.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace peregrine {
namespace {

std::string CheckCpu() {
  // volatile keeps the compiler from folding the loop into the closed form.
  volatile uint64_t n = 100000;
  uint64_t sum = 0;
  double fsum = 0;
  for (uint64_t i = 1; i <= n; ++i) {
    sum += i * i;
    fsum += static_cast<double>(i) * static_cast<double>(i);
  }
  const uint64_t expected = n * (n + 1) * (2 * n + 1) / 6;
  if (sum != expected) return absl::StrCat("integer sum of squares ", sum, " != ", expected);
  if (fsum != static_cast<double>(expected)) return absl::StrCat("float sum of squares ", fsum, " != ", expected);
  constexpr int kN = 32;
  std::vector<double> a(kN * kN), c(kN * kN, 0.0);
  for (int i = 0; i < kN * kN; ++i) a[i] = static_cast<double>((i * 7919) % 101) - 50.0;
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      double acc = 0;
      for (int k = 0; k < kN; ++k) acc += a[i * kN + k] * (k == j ? 1.0 : 0.0);
      c[i * kN + j] = acc;
    }
  }
  if (c != a) return "matrix times identity differs from the matrix";
  return "";
}

std::string CheckLogDir(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) return absl::StrCat("cannot create ", log_dir, ": ", ec.message());
  const std::string probe = absl::StrCat(log_dir, "/.peregrine-self-check-", ::getpid());
  const std::string payload = "peregrine self-check";
  {
    std::ofstream out(probe, std::ios::trunc);
    out << payload;
    if (!out.flush()) return absl::StrCat("cannot write ", probe);
  }
  std::ifstream in(probe);
  std::string read((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(probe, ec);
  if (read != payload) return absl::StrCat("read back of ", probe, " differs");
  return "";
}

std::string CheckMemory(uint64_t min_available_bytes, uint64_t* available) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t kib = 0;
    if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &kib)) return "unparseable MemAvailable line";
    *available = kib * 1024;
    if (*available < min_available_bytes) {
      return absl::StrCat("MemAvailable ", *available, " bytes < ", min_available_bytes);
    }
    return "";
  }
  return "no MemAvailable in /proc/meminfo";
}

}  // namespace

SelfCheckOutcome RunSelfCheck(const std::string& log_dir, uint64_t min_available_bytes) {
  SelfCheckOutcome outcome;
  std::vector<std::string> failures;
  std::string cpu = CheckCpu();
  absl::StrAppend(&outcome.detail, "cpu: ", cpu.empty() ? "ok" : cpu);
  if (!cpu.empty()) failures.push_back(cpu);
  if (!log_dir.empty()) {
    std::string dir = CheckLogDir(log_dir);
    absl::StrAppend(&outcome.detail, "; log_dir: ", dir.empty() ? "ok" : dir);
    if (!dir.empty()) failures.push_back(dir);
  }
  uint64_t available = 0;
  std::string memory = CheckMemory(min_available_bytes, &available);
  absl::StrAppend(&outcome.detail, "; memory: ", memory.empty() ? absl::StrCat("ok (", available >> 20, " MiB available)") : memory);
  if (!memory.empty()) failures.push_back(memory);
  outcome.passed = failures.empty();
  return outcome;
}

}  // namespace peregrine
