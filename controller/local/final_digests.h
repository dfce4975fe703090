// What each rank reported when it finished: the `[peregrine] final step=<n> <name>=<hex>`
// line a trainer prints last (sim-trainer's weight_digest, examples/pytorch's
// param_digest), read from the local cluster's rank logs (<state_dir>/logs/<pod>/rank-<g>.log).
// The demo prints them and compares them with an uninterrupted run's.
//
// Pure parsing plus one directory scan; no state. Errors: none (a missing or unreadable log,
// or a line that does not parse, contributes nothing).
// See docs/architecture.md for where local mode sits.
#ifndef PEREGRINE_CONTROLLER_LOCAL_FINAL_DIGESTS_H_
#define PEREGRINE_CONTROLLER_LOCAL_FINAL_DIGESTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace peregrine {

struct FinalDigest {
  uint64_t step = 0;
  std::string name;    // e.g. weight_digest
  std::string digest;  // lower-case hex
};

// The final line `line` reports, or nullopt when it is not one.
std::optional<FinalDigest> ParseFinalLine(absl::string_view line);

// Global rank -> its final digest, from every rank log under <state_dir>/logs. When two
// pods' logs hold a final line for the same rank (a machine replaced after its ranks
// finished), the most recently written log wins.
std::map<int, FinalDigest> ReadFinalDigests(const std::string& state_dir);

// "rank <g>: step <n> <name>=<digest>" lines, one per rank, each ending in a newline.
std::string FormatFinalDigests(const std::map<int, FinalDigest>& digests);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_FINAL_DIGESTS_H_
