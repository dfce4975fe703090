#include "agent/checkpoint/persist_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace peregrine::checkpoint {

std::string PersistStepDirName(uint64_t step) { return absl::StrFormat("step-%020d", step); }

std::string PersistStepDir(const std::string& dir, uint64_t step) {
  return absl::StrCat(dir, "/", PersistStepDirName(step));
}

std::string PersistSlotDir(const std::string& dir, uint64_t step, uint32_t slot) {
  return absl::StrCat(PersistStepDir(dir, step), "/slot-", slot);
}

std::string PersistShardPath(const std::string& dir, uint64_t step, uint32_t slot, uint32_t global_rank) {
  return absl::StrCat(PersistSlotDir(dir, step, slot), "/rank-", global_rank, ".shard");
}

std::string PersistManifestPath(const std::string& dir, uint64_t step, uint32_t slot) {
  return absl::StrCat(PersistStepDir(dir, step), "/slot-", slot, ".manifest");
}

std::optional<uint64_t> ParsePersistStepDirName(std::string_view name) {
  if (name.size() != 5 + 20 || name.substr(0, 5) != "step-") return std::nullopt;
  const std::string digits(name.substr(5));
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  uint64_t step = 0;
  if (!absl::SimpleAtoi(digits, &step)) return std::nullopt;
  return step;
}

std::string EncodePersistManifest(const PersistManifest& manifest) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const PersistManifest::Rank& r : manifest.ranks) {
    ranks.push_back({{"globalRank", r.global_rank}, {"bytes", r.bytes}, {"crc32c", r.crc32c}});
  }
  const nlohmann::json j = {{"step", manifest.step}, {"slot", manifest.slot}, {"ranks", ranks}};
  return j.dump(2) + "\n";
}

absl::StatusOr<PersistManifest> ParsePersistManifest(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::DataLossError("manifest is not a JSON object");
  auto unsigned_field = [](const nlohmann::json& obj, const char* key, uint64_t max, uint64_t* out,
                           const std::string& where) -> absl::Status {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max) {
      return absl::DataLossError(absl::StrCat("manifest ", where, key, " is missing or not an unsigned integer"));
    }
    *out = it->get<uint64_t>();
    return absl::OkStatus();
  };
  PersistManifest m;
  uint64_t value = 0;
  if (auto s = unsigned_field(j, "step", UINT64_MAX, &m.step, ""); !s.ok()) return s;
  if (auto s = unsigned_field(j, "slot", UINT32_MAX, &value, ""); !s.ok()) return s;
  m.slot = static_cast<uint32_t>(value);
  auto ranks = j.find("ranks");
  if (ranks == j.end() || !ranks->is_array() || ranks->empty()) {
    return absl::DataLossError("manifest ranks is missing or empty");
  }
  std::set<uint32_t> seen;
  for (size_t i = 0; i < ranks->size(); ++i) {
    const nlohmann::json& r = (*ranks)[i];
    const std::string where = absl::StrCat("ranks[", i, "].");
    if (!r.is_object()) return absl::DataLossError(absl::StrCat("manifest ranks[", i, "] is not an object"));
    PersistManifest::Rank rank;
    if (auto s = unsigned_field(r, "globalRank", UINT32_MAX, &value, where); !s.ok()) return s;
    rank.global_rank = static_cast<uint32_t>(value);
    if (auto s = unsigned_field(r, "bytes", UINT64_MAX, &rank.bytes, where); !s.ok()) return s;
    if (auto s = unsigned_field(r, "crc32c", UINT32_MAX, &value, where); !s.ok()) return s;
    rank.crc32c = static_cast<uint32_t>(value);
    if (!seen.insert(rank.global_rank).second) {
      return absl::DataLossError(absl::StrCat("manifest names rank ", rank.global_rank, " twice"));
    }
    m.ranks.push_back(rank);
  }
  return m;
}

std::optional<uint64_t> NextPersistStep(const std::vector<uint64_t>& eligible, const std::vector<uint64_t>& persisted,
                                        uint64_t failed_step, uint32_t every) {
  if (every == 0 || eligible.empty()) return std::nullopt;
  const uint64_t last = persisted.empty() ? 0 : *std::max_element(persisted.begin(), persisted.end());
  const uint64_t newest = *std::max_element(eligible.begin(), eligible.end());
  if (newest < last + every || newest <= failed_step || newest <= last) return std::nullopt;
  return newest;
}

std::vector<uint64_t> PersistedToDrop(const std::vector<uint64_t>& persisted, size_t keep) {
  std::vector<uint64_t> sorted(persisted);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.size() <= keep) return {};
  sorted.resize(sorted.size() - keep);
  return sorted;
}

}  // namespace peregrine::checkpoint
