#include "cli/analyze/rank_ranges.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine {

std::string RankRanges(const std::vector<int>& sorted) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(sorted[i]) : absl::StrCat(sorted[i], "-", sorted[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace peregrine
