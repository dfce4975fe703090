// SummarizeList: a long list of findings (one line per crashed rank, per failed machine)
// as bounded text for the status, conditions and events: the first entries named, then
// how many more and how many in all, so a whole large job failing at once cannot make
// the TrainingJob status or an event too large to store.
//
// Pure; thread-compatible; no ownership.
#ifndef PEREGRINE_CONTROLLER_CORE_LIST_SUMMARY_H_
#define PEREGRINE_CONTROLLER_CORE_LIST_SUMMARY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace peregrine {

// How many entries of a per-rank or per-machine list the status names before it counts.
inline constexpr size_t kMaxNamedInSummary = 16;
// The most bytes one named entry keeps (a rank's log line can be long).
inline constexpr size_t kMaxSummaryEntryBytes = 512;

// items joined by `separator`, all of them when there are at most `max_named`; else the
// first `max_named` followed by "and K more (N in all)". Each entry longer than
// kMaxSummaryEntryBytes is cut there and ends in "...". An empty list gives "".
std::string SummarizeList(const std::vector<std::string>& items, size_t max_named = kMaxNamedInSummary,
                          absl::string_view separator = "; ");

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_LIST_SUMMARY_H_
