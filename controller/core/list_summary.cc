#include "controller/core/list_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace peregrine {

std::string SummarizeList(const std::vector<std::string>& items, size_t max_named, absl::string_view separator) {
  std::string out;
  const size_t named = std::min(items.size(), max_named);
  for (size_t i = 0; i < named; ++i) {
    if (i > 0) absl::StrAppend(&out, separator);
    const std::string& item = items[i];
    if (item.size() <= kMaxSummaryEntryBytes) {
      absl::StrAppend(&out, item);
    } else {
      // Cut on a character boundary: never inside a UTF-8 sequence.
      size_t cut = kMaxSummaryEntryBytes;
      while (cut > 0 && (static_cast<unsigned char>(item[cut]) & 0xC0) == 0x80) --cut;
      absl::StrAppend(&out, absl::string_view(item).substr(0, cut), "...");
    }
  }
  if (items.size() > named) {
    absl::StrAppend(&out, named > 0 ? separator : "", "and ", items.size() - named, " more (", items.size(),
                    " in all)");
  }
  return out;
}

}  // namespace peregrine
