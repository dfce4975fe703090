#include "controller/local/final_digests.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace peregrine {
namespace {

constexpr absl::string_view kPrefix = "[peregrine] final ";

bool IsHex(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The global rank of a log named rank-<g>.log.
std::optional<int> RankOfLog(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  if (!absl::StartsWith(name, "rank-") || !absl::EndsWith(name, ".log")) return std::nullopt;
  int rank = 0;
  if (!absl::SimpleAtoi(absl::string_view(name).substr(5, name.size() - 9), &rank) || rank < 0) return std::nullopt;
  return rank;
}

}  // namespace

std::optional<FinalDigest> ParseFinalLine(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  if (!absl::StartsWith(line, kPrefix)) return std::nullopt;
  FinalDigest out;
  bool have_step = false;
  for (absl::string_view field : absl::StrSplit(line.substr(kPrefix.size()), ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) return std::nullopt;
    const absl::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "step") {
      if (!absl::SimpleAtoi(value, &out.step)) return std::nullopt;
      have_step = true;
    } else if (absl::EndsWith(key, "digest") && out.name.empty() && IsHex(value)) {
      out.name = std::string(key);
      out.digest = absl::AsciiStrToLower(value);
    }
  }
  if (!have_step || out.name.empty()) return std::nullopt;
  return out;
}

std::map<int, FinalDigest> ReadFinalDigests(const std::string& state_dir) {
  namespace fs = std::filesystem;
  std::map<int, std::pair<fs::file_time_type, FinalDigest>> newest;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(fs::path(state_dir) / "logs", ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::optional<int> rank = RankOfLog(it->path());
    if (!rank) continue;
    std::ifstream in(it->path());
    std::optional<FinalDigest> last;
    for (std::string line; std::getline(in, line);) {
      if (std::optional<FinalDigest> d = ParseFinalLine(line)) last = std::move(d);
    }
    if (!last) continue;
    const fs::file_time_type written = fs::last_write_time(it->path(), ec);
    auto [slot, inserted] = newest.try_emplace(*rank, written, *last);
    if (!inserted && written > slot->second.first) slot->second = {written, *last};
  }
  std::map<int, FinalDigest> out;
  for (auto& [rank, entry] : newest) out.emplace(rank, std::move(entry.second));
  return out;
}

std::string FormatFinalDigests(const std::map<int, FinalDigest>& digests) {
  std::string out;
  for (const auto& [rank, d] : digests) absl::StrAppendFormat(&out, "  rank %d: step %d %s=%s\n", rank, d.step, d.name, d.digest);
  return out;
}

}  // namespace peregrine
